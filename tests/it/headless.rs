//! headless tests.
