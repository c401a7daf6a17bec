//! Checks of the whole workspace, read from its sources: the walls ARCHITECTURE.md names
//! (`architecture`), no import circle within or between crates (`import_circles`), and the
//! sizes of functions and files (`sizes`).

mod architecture;
mod import_circles;
mod sizes;
