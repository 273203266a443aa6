//! The interactive session: `rho` on a terminal. Streams the assistant's text, shows each
//! tool call and its result compactly, asks approvals inline, and saves the conversation so
//! it can be resumed.
//!
//! Invariant: nothing from the model, a tool or a file reaches the terminal unsanitized
//! ([`render`]), and a session is only ever appended to ([`store`]).

pub mod approval;
pub mod commands;
pub mod render;
pub mod session;
pub mod store;
