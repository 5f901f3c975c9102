//! provider tests.
