//! cancel tests.
