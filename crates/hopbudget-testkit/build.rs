//! Compiles `proto/hop.proto` with protox (pure Rust; no `protoc` needed on the machine), and
//! writes its descriptor set next to the generated code, as a server built for reflection
//! does (`OUT_DIR/hop_descriptor.bin`).

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/hop.proto");
    let fds = protox::compile(["proto/hop.proto"], ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("hop_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
