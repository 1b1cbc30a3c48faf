//! Links the `reel` binary with packed relative relocations (RELR, `-z pack-relative-relocs`):
//! a position-independent executable otherwise carries one 24-byte record for each of its
//! pointers to itself (1.3 MB of them), and the loader reads them all at every start, `reel
//! --version` included. Packed, they take kilobytes. The executable stays position-independent
//! (its address still random); glibc 2.36 and binutils 2.38 or newer understand the format.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
}
