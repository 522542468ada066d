//! A holder in a process of its own, for the Python client's tests:
//! `holder ADDRESS LOCK KEY` waits for the key (up to 60 s), prints
//! `held FENCE`, holds it until a line arrives on stdin (or stdin closes),
//! then lets it go and prints `released`.

use holdline_client::Store;
use std::time::Duration;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [address, lock, key] = args.as_slice() else {
        return Err("usage: holder ADDRESS LOCK KEY".into());
    };
    let store = Store::connect(address).await?;
    let lock = store.lock(lock).open()?;
    lock.key(key.as_str())
        .wait(Duration::from_secs(60))
        .hold(async |lease| {
            println!("held {}", lease.fence());
            // Blocking stdin on a thread of its own: the runtime keeps
            // renewing the lease meanwhile.
            let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()))
                .await;
        })
        .await?;
    println!("released");
    Ok(())
}
