//! The `ppscope top` dashboard (ratatui) lands with the dashboard issue; this crate holds its
//! place in the workspace so the crate graph is settled from the start.
