//! The crew of an event, by the contract's rules, from its canonical payload: pure
//! functions with no I/O, which both backends call when they keep the crew rows of
//! a batch's flights and duties (and the migrations that build them), so that there
//! is one reading of the rules.
//!
//! The payload's `crew` member, when it is an array; each element a string (a crew
//! id, operating flight crew) or an object with a string `id`, an optional `role`,
//! `"operating"` (the default) or `"positioning"`, and an optional `function`,
//! `"flight_crew"` (the default) or `"cabin_crew"`; other members of an object are
//! ignored. An id is trimmed of Unicode whitespace (as the event's own fields are)
//! and must then be 1–64 characters from `!` to `~`. Anything else (an element of
//! another shape, an unknown or non-string `role` or `function`, `"role": null`
//! included, a `crew` that is not an array, a payload that does not parse) gives
//! no crew member, and the event stays valid. An id listed twice counts once,
//! operating if either listing is, and flight crew if either listing is.
//!
//! A duty's type is the string `duty_type` member of its `duty_start` payload
//! (`DutyType`); absent or anything else, a flight duty.

use std::collections::BTreeMap;

use crate::batch::json::{self, Value};

/// How deep a stored payload may nest: the event's own limit (128 levels, the
/// event object included) leaves its payload one level fewer; a little more costs
/// nothing and never refuses a payload that was stored.
const PAYLOAD_DEPTH_MAX: usize = 256;

/// The longest crew id, in characters (all ASCII, so bytes too).
pub const CREW_ID_CHARS_MAX: usize = 64;

/// What a crew member did on a flight or duty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Crew operating the flight: block time counts as flight time and duty.
    Operating,
    /// Crew carried as passengers to position: duty, not flight time.
    Positioning,
}

impl Role {
    /// The text the views show: `operating` or `positioning`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Operating => "operating",
            Role::Positioning => "positioning",
        }
    }

    /// The role a `role` member names, when it names one.
    fn parse(text: &str) -> Option<Role> {
        match text {
            "operating" => Some(Role::Operating),
            "positioning" => Some(Role::Positioning),
            _ => None,
        }
    }
}

/// What a crew member is on board for: Part 117 covers flight crew only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Function {
    FlightCrew,
    CabinCrew,
}

impl Function {
    /// The text the views show: `flight_crew` or `cabin_crew`.
    pub fn as_str(self) -> &'static str {
        match self {
            Function::FlightCrew => "flight_crew",
            Function::CabinCrew => "cabin_crew",
        }
    }

    /// The function a `function` member (or a view's column) names, when it
    /// names one.
    pub fn parse(text: &str) -> Option<Function> {
        match text {
            "flight_crew" => Some(Function::FlightCrew),
            "cabin_crew" => Some(Function::CabinCrew),
            _ => None,
        }
    }
}

/// What a duty was: how it counts as duty and whether it holds a flight duty
/// period (the contract's *Flight duty period*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DutyType {
    FlightDuty,
    AirportStandby,
    HomeStandby,
    Reserve,
    GroundDuty,
}

impl DutyType {
    /// The text the views show.
    pub fn as_str(self) -> &'static str {
        match self {
            DutyType::FlightDuty => "flight_duty",
            DutyType::AirportStandby => "airport_standby",
            DutyType::HomeStandby => "home_standby",
            DutyType::Reserve => "reserve",
            DutyType::GroundDuty => "ground_duty",
        }
    }

    /// The type a `duty_type` text names; anything else is a flight duty.
    pub fn from_text(text: &str) -> DutyType {
        match text {
            "airport_standby" => DutyType::AirportStandby,
            "home_standby" => DutyType::HomeStandby,
            "reserve" => DutyType::Reserve,
            "ground_duty" => DutyType::GroundDuty,
            _ => DutyType::FlightDuty,
        }
    }
}

/// One crew member of an event: a checked id, a role and a function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    id: String,
    role: Role,
    function: Function,
}

impl Member {
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn function(&self) -> Function {
        self.function
    }
}

/// The crew of an event given its canonical payload text, ordered by id. A payload
/// that does not parse (none that spoolite stores) gives none.
pub fn of_payload(payload: &str) -> Vec<Member> {
    match json::parse(payload, PAYLOAD_DEPTH_MAX) {
        Ok(parsed) => of_value(&parsed.value),
        Err(_) => Vec::new(),
    }
}

/// The crew and the duty type of a `duty_start` event given its canonical
/// payload text.
pub fn of_duty_payload(payload: &str) -> (Vec<Member>, DutyType) {
    match json::parse(payload, PAYLOAD_DEPTH_MAX) {
        Ok(parsed) => (of_value(&parsed.value), duty_type_of(&parsed.value)),
        Err(_) => (Vec::new(), DutyType::FlightDuty),
    }
}

/// The `duty_type` member of a payload, when it is a string naming a type.
fn duty_type_of(payload: &Value) -> DutyType {
    let Value::Object(members) = payload else {
        return DutyType::FlightDuty;
    };
    match members.iter().find(|(name, _)| name == "duty_type") {
        Some((_, Value::String(text))) => DutyType::from_text(text),
        _ => DutyType::FlightDuty,
    }
}

/// The crew of an event given its payload as a value, ordered by id.
pub(crate) fn of_value(payload: &Value) -> Vec<Member> {
    let Value::Object(members) = payload else {
        return Vec::new();
    };
    // A stored payload has no duplicate keys (they make the event invalid), so
    // the first `crew` is the only one.
    let Some((_, Value::Array(elements))) = members.iter().find(|(name, _)| name == "crew") else {
        return Vec::new();
    };
    // Operating and flight crew sort first, so the least of two listings wins.
    let mut crew: BTreeMap<&str, (Role, Function)> = BTreeMap::new();
    for (id, role, function) in elements.iter().filter_map(element) {
        crew.entry(id)
            .and_modify(|held| *held = (held.0.min(role), held.1.min(function)))
            .or_insert((role, function));
    }
    crew.into_iter()
        .map(|(id, (role, function))| Member {
            id: id.to_owned(),
            role,
            function,
        })
        .collect()
}

/// One element of `crew`: its trimmed id, role and function, or `None` when it is
/// left out.
fn element(element: &Value) -> Option<(&str, Role, Function)> {
    match element {
        Value::String(id) => Some((crew_id(id)?, Role::Operating, Function::FlightCrew)),
        Value::Object(members) => {
            let mut id = None;
            let mut role = Role::Operating;
            let mut function = Function::FlightCrew;
            for (name, value) in members {
                match (name.as_str(), value) {
                    ("id", Value::String(text)) => id = Some(crew_id(text)?),
                    ("id", _) => return None,
                    ("role", Value::String(text)) => role = Role::parse(text)?,
                    ("role", _) => return None,
                    ("function", Value::String(text)) => function = Function::parse(text)?,
                    ("function", _) => return None,
                    _ => {}
                }
            }
            Some((id?, role, function))
        }
        _ => None,
    }
}

/// A duty of one crew member, for its flight duty period: instants in any one
/// unit (microseconds, say), `end` None while open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DutySpan {
    pub start: i64,
    pub end: Option<i64>,
    pub duty_type: DutyType,
}

/// A flight of one crew member with an off-blocks: its on-blocks when it has
/// block time (None: no on-blocks, or one before the off-blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlightSpan {
    pub off_blocks: i64,
    pub on_blocks: Option<i64>,
    pub operating: bool,
}

/// The flight duty period of a crew member in a duty (14 CFR 117.3, ORO.FTL.105),
/// as (start, end; None while open): an airport standby whole; a flight or ground
/// duty from its start to the on-blocks of the last flight on which the member is
/// operating whose off-blocks lies within the duty (from its start to its end, on
/// while open), or to the duty's end where that flight has no block time; none
/// for a home standby or a reserve, or without such a flight. Of several such
/// flights with the last off-blocks (data a `check` counts as an overlap), the
/// one with the latest on-blocks ends it, one without block time before any
/// with. `flights` are the member's, in off-blocks order.
pub fn flight_duty_period(duty: &DutySpan, flights: &[FlightSpan]) -> Option<(i64, Option<i64>)> {
    match duty.duty_type {
        DutyType::AirportStandby => Some((duty.start, duty.end)),
        DutyType::HomeStandby | DutyType::Reserve => None,
        DutyType::FlightDuty | DutyType::GroundDuty => {
            let end = duty.end.unwrap_or(i64::MAX);
            let first = flights.partition_point(|f| f.off_blocks < duty.start);
            let last = flights.partition_point(|f| f.off_blocks <= end);
            let flight = flights
                .get(first..last)?
                .iter()
                .filter(|f| f.operating)
                .max_by_key(|f| (f.off_blocks, f.on_blocks))?;
            Some((duty.start, flight.on_blocks.or(duty.end)))
        }
    }
}

/// A crew id: trimmed of Unicode whitespace, then 1–64 characters from `!` to `~`.
pub fn crew_id(text: &str) -> Option<&str> {
    let trimmed = text.trim();
    let fits = (1..=CREW_ID_CHARS_MAX).contains(&trimmed.len())
        && trimmed.bytes().all(|byte| (b'!'..=b'~').contains(&byte));
    fits.then_some(trimmed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crew of `payload` as `id:role` texts, ordered by id.
    fn check(payload: &str, expected: &[&str]) {
        let found: Vec<String> = of_payload(payload)
            .iter()
            .map(|member| match member.function() {
                Function::FlightCrew => format!("{}:{}", member.id(), member.role().as_str()),
                Function::CabinCrew => format!("{}:{}:cabin", member.id(), member.role().as_str()),
            })
            .collect();
        assert_eq!(found, expected, "payload {payload}");
    }

    #[test]
    fn strings_are_operating_crew() {
        check(r#"{"crew":["C1","C2"]}"#, &["C1:operating", "C2:operating"]);
        check(r#"{"crew":["C2","C1"]}"#, &["C1:operating", "C2:operating"]);
        check(r#"{"crew":[]}"#, &[]);
    }

    #[test]
    fn objects_name_an_id_and_an_optional_role() {
        check(r#"{"crew":[{"id":"C1"}]}"#, &["C1:operating"]);
        check(
            r#"{"crew":[{"id":"C1","role":"operating"}]}"#,
            &["C1:operating"],
        );
        check(
            r#"{"crew":[{"id":"C1","role":"positioning"}]}"#,
            &["C1:positioning"],
        );
        check(
            r#"{"crew":[{"base":"LHR","id":"C1","rank":"FO","role":"positioning"}]}"#,
            &["C1:positioning"],
        );
        check(
            r#"{"crew":["C1",{"id":"C2","role":"positioning"}]}"#,
            &["C1:operating", "C2:positioning"],
        );
    }

    #[test]
    fn elements_of_any_other_shape_are_left_out() {
        check(
            r#"{"crew":[1,null,true,["C1"],{"role":"operating"},"C2"]}"#,
            &["C2:operating"],
        );
        check(r#"{"crew":[{"id":7}]}"#, &[]);
        check(r#"{"crew":[{"id":null,"role":"operating"}]}"#, &[]);
        check(r#"{"crew":[{"id":["C1"]}]}"#, &[]);
        check(r#"{"crew":[{}]}"#, &[]);
    }

    #[test]
    fn an_unknown_or_non_string_role_leaves_the_element_out() {
        check(r#"{"crew":[{"id":"C1","role":"captain"}]}"#, &[]);
        check(r#"{"crew":[{"id":"C1","role":"Operating"}]}"#, &[]);
        check(r#"{"crew":[{"id":"C1","role":" operating"}]}"#, &[]);
        check(r#"{"crew":[{"id":"C1","role":null}]}"#, &[]);
        check(r#"{"crew":[{"id":"C1","role":1}]}"#, &[]);
        check(
            r#"{"crew":[{"id":"C1","role":"captain"},"C2"]}"#,
            &["C2:operating"],
        );
    }

    #[test]
    fn a_crew_that_is_not_an_array_gives_none() {
        check(r#"{"crew":"C1"}"#, &[]);
        check(r#"{"crew":{"id":"C1"}}"#, &[]);
        check(r#"{"crew":null}"#, &[]);
        check(r#"{"crew":3}"#, &[]);
        check(r#"{"tail":"G-XWBA"}"#, &[]);
        check("{}", &[]);
        check(r#"{"Crew":["C1"]}"#, &[]);
        check(r#"{"trip":{"crew":["C1"]}}"#, &[]);
    }

    #[test]
    fn ids_are_trimmed_then_checked() {
        check(
            r#"{"crew":[" C1 ","\tC2\n"]}"#,
            &["C1:operating", "C2:operating"],
        );
        // Unicode whitespace: no-break space, ideographic space, line separator.
        check(
            r#"{"crew":["\u00a0C1\u3000","\u2028C2"]}"#,
            &["C1:operating", "C2:operating"],
        );
        check(
            r#"{"crew":[{"id":"  C3  ","role":"positioning"}]}"#,
            &["C3:positioning"],
        );
        check(
            r#"{"crew":["","   ","C 1","C\u00e91","C\u00001","C\u007f"]}"#,
            &[],
        );
        let longest = "X".repeat(CREW_ID_CHARS_MAX);
        let longer = "X".repeat(CREW_ID_CHARS_MAX + 1);
        check(
            &format!(r#"{{"crew":["{longest}","{longer}"," {longest} "]}}"#),
            &[&format!("{longest}:operating")],
        );
        check(
            r#"{"crew":["!","~","a\\b","\"q\""]}"#,
            &[
                "!:operating",
                "\"q\":operating",
                "a\\b:operating",
                "~:operating",
            ],
        );
    }

    #[test]
    fn an_id_listed_twice_counts_once_operating_if_either_is() {
        check(r#"{"crew":["C1","C1"]}"#, &["C1:operating"]);
        check(r#"{"crew":["C1"," C1"]}"#, &["C1:operating"]);
        check(
            r#"{"crew":[{"id":"C1","role":"positioning"},"C1"]}"#,
            &["C1:operating"],
        );
        check(
            r#"{"crew":["C1",{"id":"C1","role":"positioning"}]}"#,
            &["C1:operating"],
        );
        check(
            r#"{"crew":[{"id":"C1","role":"positioning"},{"id":"C1","role":"positioning"}]}"#,
            &["C1:positioning"],
        );
        // A listing left out does not count, so it cannot make the id operating.
        check(
            r#"{"crew":[{"id":"C1","role":"positioning"},{"id":"C1","role":"pilot"}]}"#,
            &["C1:positioning"],
        );
        // Ids differ in letter case: two crew members, as sent.
        check(r#"{"crew":["c1","C1"]}"#, &["C1:operating", "c1:operating"]);
    }

    #[test]
    fn a_payload_that_does_not_parse_gives_none() {
        check("", &[]);
        check(r#"{"crew":["C1""#, &[]);
        check(r#"["C1"]"#, &[]);
    }

    #[test]
    fn a_function_names_flight_or_cabin_crew_and_flight_crew_wins_a_twice_listed_id() {
        check(
            r#"{"crew":[{"id":"F1","function":"cabin_crew"},{"id":"F2","function":"flight_crew"}]}"#,
            &["F1:operating:cabin", "F2:operating"],
        );
        check(
            r#"{"crew":[{"id":"F1","function":"cabin_crew","role":"positioning"},"F1"]}"#,
            &["F1:operating"],
        );
        check(
            r#"{"crew":[{"id":"F1","function":"cabin_crew"},{"id":"F1","function":"cabin_crew"}]}"#,
            &["F1:operating:cabin"],
        );
        // An unknown or non-string function leaves the element out.
        check(r#"{"crew":[{"id":"F1","function":"purser"}]}"#, &[]);
        check(r#"{"crew":[{"id":"F1","function":null}]}"#, &[]);
    }

    #[test]
    fn a_duty_type_names_one_of_five_and_anything_else_is_a_flight_duty() {
        let of = |payload: &str| of_duty_payload(payload).1.as_str();
        assert_eq!(of(r#"{"duty_type":"home_standby"}"#), "home_standby");
        assert_eq!(
            of(r#"{"duty_type":"airport_standby","crew":["C1"]}"#),
            "airport_standby"
        );
        assert_eq!(of(r#"{"duty_type":"reserve"}"#), "reserve");
        assert_eq!(of(r#"{"duty_type":"ground_duty"}"#), "ground_duty");
        assert_eq!(of(r#"{"duty_type":"Reserve"}"#), "flight_duty");
        assert_eq!(of(r#"{"duty_type":7}"#), "flight_duty");
        assert_eq!(of("{}"), "flight_duty");
        assert_eq!(of_duty_payload(r#"{"crew":["C1"]}"#).0.len(), 1);
    }

    #[test]
    fn a_flight_duty_period_ends_at_the_last_operating_on_blocks_in_the_duty() {
        let duty = |start, end, duty_type| DutySpan {
            start,
            end,
            duty_type,
        };
        let flight = |off_blocks, on_blocks, operating| FlightSpan {
            off_blocks,
            on_blocks,
            operating,
        };
        // Duty 5–15; sectors 6–8 and 9–11, a positioning leg 12–13, one before.
        let flights = [
            flight(1, Some(2), true),
            flight(6, Some(8), true),
            flight(9, Some(11), true),
            flight(12, Some(13), false),
        ];
        let flight_duty = duty(5, Some(15), DutyType::FlightDuty);
        assert_eq!(
            flight_duty_period(&flight_duty, &flights),
            Some((5, Some(11)))
        );
        // Open: the same sectors; a last sector without block time ends it with
        // the duty, open while the duty is.
        let open = duty(5, None, DutyType::GroundDuty);
        assert_eq!(flight_duty_period(&open, &flights), Some((5, Some(11))));
        let cut = [flight(6, Some(8), true), flight(9, None, true)];
        assert_eq!(flight_duty_period(&flight_duty, &cut), Some((5, Some(15))));
        assert_eq!(flight_duty_period(&open, &cut), Some((5, None)));
        // An off-blocks exactly at either end is inside.
        let edges = [flight(15, Some(16), true)];
        assert_eq!(
            flight_duty_period(&flight_duty, &edges),
            Some((5, Some(16)))
        );
        // Two sectors from one off-blocks: the later on-blocks ends it, in
        // either order, and one without block time never wins over one with.
        for tied in [
            [flight(6, Some(8), true), flight(6, Some(7), true)],
            [flight(6, Some(7), true), flight(6, Some(8), true)],
            [flight(6, None, true), flight(6, Some(8), true)],
            [flight(6, Some(8), true), flight(6, None, true)],
        ] {
            assert_eq!(
                flight_duty_period(&flight_duty, &tied),
                Some((5, Some(8))),
                "{tied:?}"
            );
        }
        let positioning_only = [flight(6, Some(8), false)];
        assert_eq!(flight_duty_period(&flight_duty, &positioning_only), None);
        assert_eq!(
            flight_duty_period(&duty(5, Some(9), DutyType::AirportStandby), &[]),
            Some((5, Some(9)))
        );
        for duty_type in [DutyType::HomeStandby, DutyType::Reserve] {
            assert_eq!(
                flight_duty_period(&duty(5, Some(15), duty_type), &flights),
                None
            );
        }
    }
}
