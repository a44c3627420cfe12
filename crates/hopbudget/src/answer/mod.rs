//! The answers hopbudget makes itself, spelled once per protocol so that an upstream hopbudget
//! client classifies them all alike, whichever layer or handler made them ([C10](crate::contract#c10),
//! [C17](crate::contract#c17)): `http` (every feature: the core's admission layer spells with it)
//! and `grpc` (feature `grpc`). Reading an answer back is `codec::answer`.

#[cfg(feature = "grpc")]
pub(crate) mod grpc;
pub(crate) mod http;
