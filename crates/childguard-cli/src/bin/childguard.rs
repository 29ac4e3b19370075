//! The `childguard` command; everything lives in the library so that tests can wrap it.

#![deny(unsafe_code)]

fn main() {
    std::process::exit(childguard_cli::main_from(std::env::args_os()))
}
