//! (module under construction: see the console issue)
