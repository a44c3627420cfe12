//! NATS adapter (in progress).
