//! The JSON-RPC peer and `initialize`: negotiation, capabilities, and every kind of bad input.
