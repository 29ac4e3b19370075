"""Resource limits on a contained server's cgroup: a 64 MiB memory_max ends a hog in oom-kill,
which the report names; tasks_max and cpu_quota reach the kernel; bad values and limits
without containment raise ConfigError naming them."""

from __future__ import annotations

import sys

import pytest

import childguard

HOG = "x = b'a' * (512 << 20)"


def test_a_hog_over_memory_max_ends_in_oom_kill():
    server = childguard.spawn(
        [sys.executable, "-c", HOG], contain=True, memory_max="64M", tasks_max=50
    )
    assert server.wait(60.0) is not None, "the hog did not end within 60 s"
    report = server.close()
    assert report.oom_kill, report
    limits = report.limits
    assert limits is not None
    assert limits["result"] == "oom-kill" and limits["oom_kills"] >= 1, limits
    assert limits["limits"]["memory_max"] == 64 << 20 and limits["limits"]["tasks_max"] == 50
    assert 32 << 20 < limits["memory_peak"] <= 64 << 20, limits
    assert "oom-kill" in str(report)
    assert report.cgroup is not None and report.cgroup["removed"], report.cgroup


def test_a_quiet_server_is_not_an_oom_kill_and_its_cpu_quota_is_written():
    with childguard.spawn(["sleep", "1000"], contain=True, cpu_quota=50) as server:
        pass
    report = server.report
    assert not report.oom_kill
    assert report.limits is not None and report.limits["limits"]["cpu_quota"] == 50
    place = report.limits["hierarchies"][0]
    assert place.startswith("cpu: cgroup v"), place


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"memory_max": "lots", "contain": True}, "memory_max=lots"),
        ({"cpu_quota": "50", "contain": True}, "percentage"),
        ({"tasks_max": 1.5, "contain": True}, "tasks_max=1.5"),
        ({"tasks_max": 10}, "need"),
    ],
)
def test_bad_limits_are_config_errors_naming_them(kwargs, needle):
    with pytest.raises(childguard.ConfigError) as e:
        childguard.spawn(["true"], **kwargs)
    assert needle in str(e.value), str(e.value)
