//! official_client tests.
