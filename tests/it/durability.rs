//! durability tests.
