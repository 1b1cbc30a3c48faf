//! Compiles the .proto files with protox (pure Rust, no system `protoc`), generates prost types,
//! pbjson serde impls for the canonical JSON mapping, and the list of `reel.chat.v1` messages
//! that `Any` can carry.

use std::{env, fs, path::PathBuf};

use protox::prost::Message;

const PROTOS: &[&str] = &["reel/rpc/v1/rpc.proto", "reel/chat/v1/chat.proto"];
const CHAT_PACKAGE: &str = "reel.chat.v1";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);

    let descriptors = protox::compile(PROTOS, ["proto"])?;

    // Maps are BTreeMaps: their JSON (and so every export and frame) is in a stable order.
    prost_build::Config::new()
        .btree_map(["."])
        .extern_path(".google.protobuf.Any", "crate::Any")
        .compile_fds(descriptors.clone())?;

    pbjson_build::Builder::new()
        .register_descriptors(&descriptors.encode_to_vec())?
        .extern_path(".google.protobuf.Any", "crate::Any")
        .btree_map(["."])
        .ignore_unknown_fields()
        .build(&[".reel"])?;

    let chat_messages: Vec<String> = descriptors
        .file
        .iter()
        .filter(|file| file.package() == CHAT_PACKAGE)
        .flat_map(|file| file.message_type.iter().map(|m| m.name().to_owned()))
        .collect();
    let registry = format!("chat_payloads! {{ {} }}\n", chat_messages.join(", "));
    fs::write(out_dir.join("chat_payloads.rs"), registry)?;
    Ok(())
}
