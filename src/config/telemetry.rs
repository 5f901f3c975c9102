//! `[telemetry]`: what the OpenTelemetry export may carry beyond counts and names
//! (`log_prompts`: the user's prompt text on the turn's span, off by default). Whether anything
//! is exported at all is the standard `OTEL_EXPORTER_OTLP_*` variables' to say (`crate::telemetry`).

use serde::Deserialize;

/// `[telemetry]` as written in the file; unknown keys are refused, naming the section.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TelemetrySettings {
    /// Put the user's prompt text (bounded) on the turn's span.
    #[serde(default)]
    pub log_prompts: bool,
}
