//! Compiles `proto/shop.proto` with protox, in pure Rust: no `protoc` on the machine needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/shop.proto");
    let fds = protox::compile(["proto/shop.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
