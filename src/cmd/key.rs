//! `spoolite key`: an event's canonical identity and idempotency key, as a sender
//! computes them.

use std::process::ExitCode;

use super::ingest::EXIT_REJECTED;
use crate::batch::Event;
use crate::cli::KeyArgs;

pub fn key(args: &KeyArgs) -> ExitCode {
    match Event::identity(&args.flight_id, &args.event_kind, &args.instant) {
        Ok(event) => {
            println!("flight_id        {}", event.flight_id());
            println!("event_kind       {}", event.event_kind());
            println!("instant_utc      {}", event.instant_utc());
            println!("idempotency_key  {}", event.key_hex());
            ExitCode::SUCCESS
        }
        Err(invalid) => {
            eprintln!("spoolite: {}: {}", invalid.reason.code(), invalid.detail);
            ExitCode::from(EXIT_REJECTED)
        }
    }
}
