//! Runnable examples for hopbudget. The examples are the `[[example]]` targets of this crate;
//! this library only holds what several of them share.
