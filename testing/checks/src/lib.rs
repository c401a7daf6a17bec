//! Workspace-wide checks; they are tests, in `tests/checks/`. This library is empty: a package
//! needs a target of its own besides its tests.
