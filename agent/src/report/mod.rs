//! The command-line faces for people (and scripts): `diagnose` text and JSON ([`text`](mod@text),
//! [`json`](mod@json)), `doctor` ([`doctor`]), `simulate` ([`simulate`]) and the HTML report of
//! `diagnose --html` and `simulate --html` ([`html`]).
pub mod doctor;
pub mod html;
pub mod json;
pub mod simulate;
pub mod text;

pub use json::json;
pub use text::{duration_ns, histogram, text};
