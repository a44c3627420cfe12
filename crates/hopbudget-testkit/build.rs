//! Compiles `proto/hop.proto` with protox (pure Rust; no `protoc` needed on the machine).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/hop.proto");
    let fds = protox::compile(["proto/hop.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
