//! The `slowserver` fixture binary; see the library docs for flags and protocol.

#![deny(unsafe_code)]

fn main() {
    slowserver::main_with(Vec::new(), std::env::args_os().skip(1).collect())
}
