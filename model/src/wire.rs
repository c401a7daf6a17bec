//! The agent-to-collector wire protocol. Each version lives in its own module and never
//! changes once released; a new shape gets a new module and a new `version` number.

pub mod v1;
