// `sqlx::migrate!` embeds crates/evo-store/migrations at compile time: rebuild when a
// migration is added or changed.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    println!("cargo:rerun-if-changed=migrations/sqlite");
    println!("cargo:rerun-if-changed=migrations/postgres");
}
