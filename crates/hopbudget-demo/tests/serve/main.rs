//! `hopbudget-demo serve`: one service of the demo topology alone, in its own process. A test
//! binary of its own: it spawns the command rather than running the demo in process.

mod one_service;
