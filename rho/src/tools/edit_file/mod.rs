//! `edit_file`: replaces an exact string in one existing UTF-8 file (Rho's `str_replace`
//! format): exactly one match unless `replace_all`.
//!
//! Invariant: nothing is written unless the match rules of [`replace`] hold.

pub mod replace;
