//! The core: the one wait primitive ([`wait`]) every blocking wait of the library goes
//! through (the event loop joins it here).

pub(crate) mod wait;
