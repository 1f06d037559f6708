//! The command-line faces for people (and scripts): `diagnose` text and JSON ([`text`],
//! [`json`]), `doctor` ([`doctor`]) and `simulate` ([`simulate`]).
pub mod doctor;
pub mod json;
pub mod simulate;
pub mod text;

pub use json::json;
pub use text::{duration_ns, histogram, text};
