//! What ppscope reads from the host it runs on, outside its own BPF maps: BTF, kallsyms and
//! /proc, netlink's page-pool interface, ethtool ring sizes, capabilities. Everything that
//! depends on the running kernel's layout is discovered here at run time, never hard-coded.
pub mod btf;
pub mod ethtool;
pub mod netlink;
pub mod signals;
pub mod system;
