//! A kernel on this machine: launching it (pi-repl's launcher or an installed kernelspec) in
//! its own process group, optionally its own PID namespace and huge-page heap, connecting its
//! channels and watching its process; the processes it leaves and how they end; a live fork of
//! another kernel adopted as this host's. The facade (`kernel`) drives it through `Kernel`.

pub mod boot;
pub mod huge_pages;
pub mod isolation;
pub mod kernelspecs;
pub mod launch;
pub mod leftovers;
pub mod live_fork;
pub mod processes;
