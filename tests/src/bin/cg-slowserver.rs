//! slowserver, built inside the test package so integration tests can find it.

#![deny(unsafe_code)]

fn main() {
    slowserver::main_with(Vec::new(), std::env::args_os().skip(1).collect())
}
