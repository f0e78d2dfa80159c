//! `patchdiff_observe_scope`: candidate discovery, exact selection, observation pages and
//! bundles over a target's structural outline.
