# childguard tasks. `just --list` shows them.

# The README demo: a server with a 10 s read in flight, closed by childguard.
demo:
    cargo run --release --example demo -p childguard

# The test suite (the README's test command): installs missing real servers, then cargo test.
test *ARGS:
    bash tests/run.sh {{ARGS}}

# fmt, clippy and cargo-deny, as CI runs them.
lint:
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets --all-features -- -D warnings
    cargo deny check bans licenses sources

# Benchmarks, JSON rows (ratio = ours / baseline, lower is better).
# The `childguard` binary is built too, as users install it (static on Linux with glibc, by
# install.sh; not the dynamic one beside the bench): the init scenario times it, not the bench
# posing as it.
bench *SCENARIOS:
    cargo build --release -p childguard-bench
    bash crates/childguard-cli/install.sh target/cli-release
    CHILDGUARD_BENCH_CLI=target/cli-release/bin/childguard ./target/release/childguard-bench --json {{SCENARIOS}}

# Installs the `childguard` command into PREFIX/bin (static-pie on Linux with glibc).
install-cli PREFIX="/usr/local":
    bash crates/childguard-cli/install.sh {{PREFIX}}

# Everything CI does (installs peers with apt when missing).
ci:
    bash .ci/run
