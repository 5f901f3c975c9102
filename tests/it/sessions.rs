//! sessions tests.
