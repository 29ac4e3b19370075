//! The `childguard` CLI, built inside the test package so integration tests can find it.

#![deny(unsafe_code)]

fn main() {
    std::process::exit(childguard_cli::main_from(std::env::args_os()))
}
