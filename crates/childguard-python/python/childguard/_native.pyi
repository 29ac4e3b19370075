# Type stubs of the extension module childguard._native (src/*.rs). Use the Python layer
# (childguard.spawn, childguard.Server) rather than this module directly.
from typing import Any, List, Optional, Sequence, Tuple, Union

DEFAULT_LADDER: str

class Handle:
    @property
    def pid(self) -> Optional[int]: ...
    @property
    def program(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    def socket_fd(self) -> Optional[int]: ...
    def socket_path(self) -> Optional[str]: ...
    def output_tail(self) -> Optional[str]: ...
    def try_wait(self) -> Optional[int]: ...
    def wait(self, timeout: float) -> Optional[int]: ...
    def kill(self, signal: Union[int, str], grace: float) -> Optional[int]: ...
    def close(self) -> Tuple[str, str]: ...
    def detach(self) -> Optional[int]: ...

def spawn(
    argv: Sequence[str],
    *,
    env: Optional[List[Tuple[str, str]]] = ...,
    cwd: Optional[str] = ...,
    ladder: Optional[str] = ...,
    ready: Optional[Tuple[Any, ...]] = ...,
    ready_timeout: Optional[float] = ...,
    contain: Union[bool, str, None] = ...,
    kill_mode: Optional[str] = ...,
    cgroup_parent: Optional[str] = ...,
    process_group: bool = ...,
    socket: Optional[str] = ...,
    capture: Optional[str] = ...,
    exit_with_parent: bool = ...,
    uid: Optional[int] = ...,
    gid: Optional[int] = ...,
    notify_owner: Optional[Tuple[int, int]] = ...,
    stdin_null: bool = ...,
    stdout_null: bool = ...,
    stderr_null: bool = ...,
    connect_timeout: Optional[float] = ...,
    runtime_dir: Optional[str] = ...,
    notify_access: Optional[str] = ...,
) -> Handle: ...
def parse_ladder(text: str) -> str: ...
