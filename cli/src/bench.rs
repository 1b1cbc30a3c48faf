pub async fn run(_args: BenchArgs) -> u8 { 0 }
#[derive(clap::Args, Debug)] pub struct BenchArgs {}
