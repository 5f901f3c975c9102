//! Domain ⇄ wire: prompt blocks to parts, updates to `session/update`, errors to JSON-RPC errors.
//!
//! Where history parts, session updates, config options, stop reasons and session errors become
//! `agent-client-protocol-schema`'s types (the editor's services are asked in `client` and
//! `question`). [`Shown`] holds the optional update kinds a client advertised; without them a
//! notice or a compaction is told as a short agent message, and boolean options are left out.
//! The client's `mcpServers` become `mcp::ServerConfig`s; an SSE server is left out with a note.

use agent_client_protocol_schema::v1 as acp;
use serde_json::Value;

use crate::agent::TurnError;
use crate::agent::prompt::{ClientMode, ClientPrompt};
use crate::history::{
    CallState, Part, PlanEntry, PlanPriority, PlanStatus, ToolContent, ToolKind, ToolPart, plan_steps,
};
use crate::ids::MessageId;
use crate::llm::LlmError;
use crate::llm::catalog::ThoughtLevel;
use crate::mcp::ServerConfig;
use crate::permissions::Mode;
use crate::session::{CompactionState, SessionError, SessionView, SubagentInfo, Update};
use crate::store::StoreError;

/// The optional `session/update` kinds a client advertised.
#[derive(Clone, Copy, Debug, Default)]
pub struct Shown {
    /// `notice`; otherwise notes are short agent messages.
    pub notices: bool,
    /// `compaction_update` and `compaction_summary_chunk`; otherwise a short agent message.
    pub compaction: bool,
    /// Boolean config options (`steer`); otherwise they are left out of the session's options.
    pub booleans: bool,
    /// `plan_update` and `plan_removed`; otherwise the legacy `plan`.
    pub plans: bool,
    /// Sub-agents as sessions of their own (`subagent_update`, their updates on their own ids,
    /// `session_message`, the `session` content of a `task` card); otherwise only the card.
    pub subagents: bool,
}

/// The id of a session's one checklist (the `todo` tool's) in `plan_update` / `plan_removed`:
/// each update replaces it whole.
pub const CHECKLIST: &str = "todo";
/// The id of the plan presented for review (`exit_plan`) in `plan_update`: the latest replaces it.
pub const PLAN_DOCUMENT: &str = "plan";

/// A prompt block as a part to store and send to the model.
pub fn block_to_part(block: acp::ContentBlock) -> Result<Part, acp::Error> {
    Ok(match block {
        acp::ContentBlock::Text(text) => Part::Text { text: text.text },
        acp::ContentBlock::Image(image) => Part::Image { mime_type: image.mime_type, data: image.data, uri: image.uri },
        acp::ContentBlock::ResourceLink(link) => Part::ResourceLink {
            uri: link.uri,
            name: link.name,
            mime_type: link.mime_type,
            title: link.title,
            description: link.description,
            size: link.size,
        },
        acp::ContentBlock::Resource(embedded) => match embedded.resource {
            acp::EmbeddedResourceResource::TextResourceContents(text) => {
                Part::Resource { uri: text.uri, mime_type: text.mime_type, text: text.text }
            }
            acp::EmbeddedResourceResource::BlobResourceContents(blob) => {
                Part::BlobResource { uri: blob.uri, mime_type: blob.mime_type, blob: blob.blob }
            }
            _ => return Err(invalid_params("prompt: this kind of embedded resource is not supported")),
        },
        acp::ContentBlock::Audio(_) => {
            return Err(invalid_params(
                "prompt: audio content is not supported (promptCapabilities.audio is false); send text or an image",
            ));
        }
        _ => return Err(invalid_params("prompt: unknown content block type")),
    })
}

/// A stored part as the content block a client shows.
pub fn part_to_block(part: &Part) -> Option<acp::ContentBlock> {
    Some(match part {
        Part::Text { text } | Part::Reasoning { text, .. } | Part::Notice { text } => {
            acp::ContentBlock::Text(acp::TextContent::new(text.clone()))
        }
        Part::RedactedReasoning { .. } => return None,
        Part::Image { mime_type, data, uri } => {
            acp::ContentBlock::Image(acp::ImageContent::new(data.clone(), mime_type.clone()).uri(uri.clone()))
        }
        Part::ResourceLink { uri, name, mime_type, title, description, size } => acp::ContentBlock::ResourceLink(
            acp::ResourceLink::new(name.clone(), uri.clone())
                .mime_type(mime_type.clone())
                .title(title.clone())
                .description(description.clone())
                .size(*size),
        ),
        Part::Resource { uri, mime_type, text } => acp::ContentBlock::Resource(acp::EmbeddedResource::new(
            acp::EmbeddedResourceResource::TextResourceContents(
                acp::TextResourceContents::new(text.clone(), uri.clone()).mime_type(mime_type.clone()),
            ),
        )),
        Part::BlobResource { uri, mime_type, blob } => acp::ContentBlock::Resource(acp::EmbeddedResource::new(
            acp::EmbeddedResourceResource::BlobResourceContents(
                acp::BlobResourceContents::new(blob.clone(), uri.clone()).mime_type(mime_type.clone()),
            ),
        )),
        Part::Tool(_) | Part::Compaction(_) => return None,
    })
}

/// The `session/update` for an update, or `None` if this client should not get it.
pub fn update_to_wire(update: Update, shown: Shown) -> Option<acp::SessionUpdate> {
    let chunk = |message: MessageId, block: acp::ContentBlock| {
        acp::ContentChunk::new(block).message_id(acp::MessageId::new(message.as_str()))
    };
    Some(match update {
        Update::UserChunk { message, part } => {
            acp::SessionUpdate::UserMessageChunk(chunk(message, part_to_block(&part)?))
        }
        Update::AgentText { message, text } => acp::SessionUpdate::AgentMessageChunk(chunk(message, text.into())),
        Update::AgentThought { message, text } => acp::SessionUpdate::AgentThoughtChunk(chunk(message, text.into())),
        Update::ToolCall(tool) => acp::SessionUpdate::ToolCall(
            acp::ToolCall::new(tool.call_id.clone(), tool.title.clone())
                .name(tool.name.clone())
                .kind(tool_kind(tool.kind))
                .status(tool_status(tool.state))
                .locations(locations(&tool))
                .raw_input(raw_input(&tool))
                .content(tool_content(&tool, shown.subagents)),
        ),
        Update::ToolCallUpdate(tool) => acp::SessionUpdate::ToolCallUpdate(tool_update(&tool, shown.subagents)),
        // An empty checklist is no plan: the client takes it away.
        Update::Plan(entries) if shown.plans && entries.is_empty() => {
            acp::SessionUpdate::PlanRemoved(acp::PlanRemoved::new(CHECKLIST))
        }
        Update::Plan(entries) if shown.plans => acp::SessionUpdate::PlanUpdate(acp::PlanUpdate::new(
            acp::PlanUpdateContent::Items(acp::PlanItems::new(CHECKLIST, plan_entries(entries))),
        )),
        Update::Plan(entries) => acp::SessionUpdate::Plan(acp::Plan::new(plan_entries(entries))),
        // A plan presented for review is a document of its own beside the checklist; a client
        // with one plan gets its steps (the card holds the text).
        Update::PlanDocument(text) if shown.plans => {
            acp::SessionUpdate::PlanUpdate(acp::PlanUpdate::new(acp::PlanUpdateContent::markdown(PLAN_DOCUMENT, text)))
        }
        Update::PlanDocument(text) => acp::SessionUpdate::Plan(acp::Plan::new(plan_entries(plan_steps(&text)))),
        Update::Mode(mode) => acp::SessionUpdate::CurrentModeUpdate(acp::CurrentModeUpdate::new(mode.id())),
        Update::Title(title) => acp::SessionUpdate::SessionInfoUpdate(acp::SessionInfoUpdate::new().title(title)),
        // Stored, so it names its message, like a chunk of it would (the notice has no field
        // for it): a load shows it again the same way.
        Update::Notice { message, text } if shown.notices => {
            let mut meta = acp::Meta::new();
            meta.insert("cairn".into(), serde_json::json!({ "messageId": message.as_str() }));
            acp::SessionUpdate::Notice(acp::Notice::new(acp::NoticeSeverity::Warning, text).meta(meta))
        }
        // Clients without notices see the note as a short agent message, ended by a blank line:
        // a client that joins chunks must not run it into the answer that follows.
        Update::Notice { message, text } => {
            acp::SessionUpdate::AgentMessageChunk(chunk(message, format!("{text}\n\n").into()))
        }
        // What is not stored has no message id: a client cannot take it for part of one.
        Update::EphemeralNotice { text, warning } if shown.notices => {
            let severity = if warning { acp::NoticeSeverity::Warning } else { acp::NoticeSeverity::Info };
            acp::SessionUpdate::Notice(acp::Notice::new(severity, text))
        }
        // As a message of its own: a client that joins chunks must not run it into the next.
        Update::EphemeralNotice { text, .. } => {
            acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(format!("{text}\n\n").into()))
        }
        Update::EphemeralText { text } => acp::SessionUpdate::AgentMessageChunk(acp::ContentChunk::new(text.into())),
        Update::Usage { used, size, cost } => acp::SessionUpdate::UsageUpdate(
            acp::UsageUpdate::new(used, size).cost(cost.map(|amount| acp::Cost::new(amount, "USD"))),
        ),
        Update::Commands(commands) => available_commands(&commands),
        Update::Options(view) => {
            acp::SessionUpdate::ConfigOptionUpdate(acp::ConfigOptionUpdate::new(config_options(&view, shown)))
        }
        Update::CompactionSummary { id, text } if shown.compaction => acp::SessionUpdate::CompactionSummaryChunk(
            acp::CompactionSummaryChunk::new(id.as_str().to_owned(), text.into()),
        ),
        Update::Compaction { id, state, error, .. } if shown.compaction => {
            let status = match state {
                CompactionState::InProgress => acp::CompactionStatus::InProgress,
                CompactionState::Completed => acp::CompactionStatus::Completed,
                CompactionState::Failed => acp::CompactionStatus::Failed,
            };
            let update = acp::CompactionUpdate::new(id.as_str().to_owned(), status);
            // `error` has patch semantics: leave it out rather than send null.
            acp::SessionUpdate::CompactionUpdate(match error {
                Some(error) => update.error(error),
                None => update,
            })
        }
        // Clients without compaction updates see one short agent message when it is done (a
        // failure is a stored notice of its own).
        Update::Compaction { id, state: CompactionState::Completed, note, .. } => {
            acp::SessionUpdate::AgentMessageChunk(chunk(id, format!("{note}\n\n").into()))
        }
        Update::Compaction { state: CompactionState::InProgress | CompactionState::Failed, .. }
        | Update::CompactionSummary { .. } => {
            return None;
        }
        Update::Subagent(info) if shown.subagents => acp::SessionUpdate::SubagentUpdate(subagent_update(&info)),
        Update::SessionMessage(message) if shown.subagents => {
            let mut update = acp::SessionMessage::new(acp::MessageId::new(message.id.as_str()))
                .content(vec![acp::ContentBlock::from(message.text)]);
            if let Some(from) = message.from {
                update = update.sender_session_id(acp::SessionId::new(from.as_str()));
            }
            if let Some(to) = message.to {
                update = update.recipient_session_id(acp::SessionId::new(to.as_str()));
            }
            acp::SessionUpdate::SessionMessage(update)
        }
        // Another session's update: the sink sends it under that session's id.
        Update::Subagent(_) | Update::SessionMessage(_) | Update::Elsewhere { .. } => return None,
    })
}

/// A sub-agent announced on its parent: what it does, where, whether it runs, and that the
/// client may cancel it (`session/cancel` on its id).
fn subagent_update(info: &SubagentInfo) -> acp::SubagentUpdate {
    let state = match &info.ended {
        None => acp::StateUpdate::Running(acp::RunningStateUpdate::new()),
        Some(Ok(stop)) => {
            let reason = match stop {
                crate::agent::StopReason::EndTurn => acp::IdleStopReason::EndTurn,
                crate::agent::StopReason::MaxTokens => acp::IdleStopReason::MaxTokens,
                crate::agent::StopReason::MaxTurnRequests => acp::IdleStopReason::MaxTurnRequests,
                crate::agent::StopReason::Refusal => acp::IdleStopReason::Refusal,
                crate::agent::StopReason::Cancelled => acp::IdleStopReason::Cancelled,
            };
            acp::StateUpdate::Idle(acp::IdleStateUpdate::new().stop_reason(reason))
        }
        Some(Err(why)) => {
            let error = acp::Error::new(acp::ErrorCode::InternalError.into(), why.clone());
            acp::StateUpdate::Idle(
                acp::IdleStateUpdate::new()
                    .stop_reason(acp::IdleStopReason::Error(acp::ErrorStopReason::new().error(error))),
            )
        }
    };
    let capabilities = match info.ended {
        None => acp::SubagentSessionCapabilities::new().cancel(acp::SessionCancelCapabilities::new()),
        Some(_) => acp::SubagentSessionCapabilities::new(),
    };
    let update = acp::SubagentUpdate::new(acp::SessionId::new(info.child.as_str()))
        .title(info.title.clone())
        .description(format!("Sub-agent `{}`", info.agent))
        .capabilities(capabilities)
        .state(state);
    match &info.cwd {
        Some(cwd) => update.cwd(std::path::PathBuf::from(cwd)),
        None => update,
    }
}

/// A tool call's whole current state as a `tool_call_update` (also what a permission request
/// shows); `subagents`: whether the client takes `session` content.
pub fn tool_update(tool: &ToolPart, subagents: bool) -> acp::ToolCallUpdate {
    acp::ToolCallUpdate::new(
        tool.call_id.clone(),
        acp::ToolCallUpdateFields::new()
            .title(tool.title.clone())
            .kind(tool_kind(tool.kind))
            .status(tool_status(tool.state))
            .locations(locations(tool))
            .raw_input(raw_input(tool))
            .content(tool_content(tool, subagents)),
    )
}

fn tool_status(state: CallState) -> acp::ToolCallStatus {
    match state {
        CallState::New | CallState::Suspended | CallState::Resuming => acp::ToolCallStatus::Pending,
        CallState::Running => acp::ToolCallStatus::InProgress,
        CallState::Succeeded => acp::ToolCallStatus::Completed,
        CallState::Failed | CallState::Cancelled => acp::ToolCallStatus::Failed,
    }
}

fn tool_kind(kind: ToolKind) -> acp::ToolKind {
    match kind {
        ToolKind::Read => acp::ToolKind::Read,
        ToolKind::Edit => acp::ToolKind::Edit,
        ToolKind::Search => acp::ToolKind::Search,
        ToolKind::Execute => acp::ToolKind::Execute,
        ToolKind::Think => acp::ToolKind::Think,
        ToolKind::Fetch => acp::ToolKind::Fetch,
        ToolKind::SwitchMode => acp::ToolKind::SwitchMode,
        ToolKind::Other => acp::ToolKind::Other,
    }
}

fn plan_entries(entries: Vec<PlanEntry>) -> Vec<acp::PlanEntry> {
    entries
        .into_iter()
        .map(|entry| acp::PlanEntry::new(entry.content, plan_priority(entry.priority), plan_status(entry.status)))
        .collect()
}

fn plan_priority(priority: PlanPriority) -> acp::PlanEntryPriority {
    match priority {
        PlanPriority::High => acp::PlanEntryPriority::High,
        PlanPriority::Medium => acp::PlanEntryPriority::Medium,
        PlanPriority::Low => acp::PlanEntryPriority::Low,
    }
}

fn plan_status(status: PlanStatus) -> acp::PlanEntryStatus {
    match status {
        PlanStatus::Pending => acp::PlanEntryStatus::Pending,
        PlanStatus::InProgress => acp::PlanEntryStatus::InProgress,
        PlanStatus::Completed => acp::PlanEntryStatus::Completed,
    }
}

fn locations(tool: &ToolPart) -> Vec<acp::ToolCallLocation> {
    tool.locations.iter().map(|at| acp::ToolCallLocation::new(at.path.clone()).line(at.line)).collect()
}

/// The arguments as JSON; `None` while they are still streaming.
fn raw_input(tool: &ToolPart) -> Option<Value> {
    if tool.input.trim().is_empty() {
        return None;
    }
    Some(serde_json::from_str(&tool.input).unwrap_or_else(|_| Value::String(tool.input.clone())))
}

/// What the call shows: its content, then the images the model was sent (each stored once, as
/// the model's); a failure without content of its own shows its message.
fn tool_content(tool: &ToolPart, subagents: bool) -> Vec<acp::ToolCallContent> {
    let images = tool.images.iter().map(|image| image_content(&image.mime_type, &image.data));
    if tool.content.is_empty() {
        let failed = matches!(tool.state, CallState::Failed | CallState::Cancelled);
        return match (&tool.output, failed) {
            (Some(output), true) => vec![text_content(output.clone())],
            _ => images.collect(),
        };
    }
    tool.content
        .iter()
        .filter_map(|content| {
            Some(match content {
                ToolContent::Text { text } => text_content(text.clone()),
                ToolContent::Diff { path, old_text, new_text } => acp::ToolCallContent::Diff(
                    acp::Diff::new(path.clone(), new_text.clone()).old_text(old_text.clone()),
                ),
                ToolContent::Terminal { terminal_id } => {
                    acp::ToolCallContent::Terminal(acp::Terminal::new(terminal_id.clone()))
                }
                ToolContent::Image { mime_type, data } => image_content(mime_type, data),
                ToolContent::Session { session_id } if subagents => {
                    acp::ToolCallContent::Session(acp::SessionReference::new(acp::SessionId::new(session_id.as_str())))
                }
                // A client that does not know sub-agent sessions has no use for the link.
                ToolContent::Session { .. } => return None,
            })
        })
        .chain(images)
        .collect()
}

fn image_content(mime_type: &str, data: &str) -> acp::ToolCallContent {
    acp::ToolCallContent::Content(acp::Content::new(acp::ContentBlock::Image(acp::ImageContent::new(
        data.to_owned(),
        mime_type.to_owned(),
    ))))
}

fn text_content(text: String) -> acp::ToolCallContent {
    acp::ToolCallContent::Content(acp::Content::new(acp::ContentBlock::from(text)))
}

/// The session's config options: the model picker, the permission mode, the reasoning level
/// (models that reason), and whether prompts steer running turns (clients that take booleans).
pub fn config_options(view: &SessionView, shown: Shown) -> Vec<acp::SessionConfigOption> {
    let models: Vec<acp::SessionConfigSelectOption> =
        view.models.iter().map(|model| acp::SessionConfigSelectOption::new(model.clone(), model.clone())).collect();
    let modes: Vec<acp::SessionConfigSelectOption> = Mode::ALL
        .iter()
        .map(|mode| {
            acp::SessionConfigSelectOption::new(mode.id(), mode.name()).description(mode.description().to_owned())
        })
        .collect();
    let mut options = vec![
        acp::SessionConfigOption::select("model", "Model", view.model.clone(), models)
            .category(acp::SessionConfigOptionCategory::Model)
            .description("The model that answers; a change applies from the next prompt".to_owned()),
        acp::SessionConfigOption::select("mode", "Mode", view.mode.id(), modes)
            .category(acp::SessionConfigOptionCategory::Mode)
            .description("When cairn asks before editing files or running commands".to_owned()),
    ];
    if let Some(level) = view.thought {
        let levels: Vec<acp::SessionConfigSelectOption> = ThoughtLevel::ALL
            .iter()
            .map(|level| acp::SessionConfigSelectOption::new(level.id(), thought_name(*level)))
            .collect();
        options.push(
            acp::SessionConfigOption::select("thought_level", "Thinking", level.id(), levels)
                .category(acp::SessionConfigOptionCategory::ThoughtLevel)
                .description("How much the model reasons before it answers".to_owned()),
        );
    }
    if shown.booleans {
        options.push(acp::SessionConfigOption::boolean("steer", "Steer running turns", view.steer).description(
            "A prompt sent while a turn runs joins it before its next model request, instead of waiting for it to end"
                .to_owned(),
        ));
    }
    options
}

fn thought_name(level: ThoughtLevel) -> &'static str {
    match level {
        ThoughtLevel::Off => "Off",
        ThoughtLevel::Low => "Low",
        ThoughtLevel::Medium => "Medium",
        ThoughtLevel::High => "High",
    }
}

/// How a turn ended, in the wire's words.
pub fn stop_reason(stop: crate::agent::StopReason) -> acp::StopReason {
    use crate::agent::StopReason;
    match stop {
        StopReason::EndTurn => acp::StopReason::EndTurn,
        StopReason::MaxTokens => acp::StopReason::MaxTokens,
        StopReason::MaxTurnRequests => acp::StopReason::MaxTurnRequests,
        StopReason::Refusal => acp::StopReason::Refusal,
        StopReason::Cancelled => acp::StopReason::Cancelled,
    }
}

/// A `session/update`'s params as JSON. A new tool call says `"status": "pending"`, which the
/// schema leaves out as the default, so no client shows a card without a status.
pub fn notification_json(session: &str, update: acp::SessionUpdate) -> Option<Value> {
    let pending = matches!(update, acp::SessionUpdate::ToolCall(_));
    let mut value = match serde_json::to_value(acp::SessionNotification::new(session.to_owned(), update)) {
        Ok(value) => value,
        Err(err) => {
            tracing::error!(%err, "could not serialize an update");
            return None;
        }
    };
    if pending && let Some(update) = value.get_mut("update").and_then(Value::as_object_mut) {
        update.entry("status").or_insert_with(|| "pending".into());
    }
    Some(value)
}

/// The context and cost of a session as a `usage_update`.
pub fn usage_update(view: &SessionView) -> acp::SessionUpdate {
    update_to_wire(view.usage.into(), Shown::default())
        .unwrap_or(acp::SessionUpdate::UsageUpdate(acp::UsageUpdate::new(view.usage.used, view.usage.size)))
}

/// The session's modes, for clients that use `session/set_mode` rather than config options.
pub fn modes(view: &SessionView) -> acp::SessionModeState {
    let available = Mode::ALL
        .iter()
        .map(|mode| acp::SessionMode::new(mode.id(), mode.name()).description(mode.description().to_owned()))
        .collect();
    acp::SessionModeState::new(view.mode.id(), available)
}

pub fn invalid_params(why: impl Into<String>) -> acp::Error {
    acp::Error::new(acp::ErrorCode::InvalidParams.into(), why)
}

/// A session failure as the JSON-RPC error the client sees; the message says what to do.
/// The JSON-RPC error code of a session another cairn process is running a turn in (a
/// server-defined code, clear of the ones ACP defines); `data.holder` names that process.
pub const SESSION_IN_USE: i32 = -32010;

pub fn session_error(err: &SessionError) -> acp::Error {
    let code = match err {
        SessionError::Store(StoreError::Leased(_)) => acp::ErrorCode::Other(SESSION_IN_USE),
        SessionError::NotFound(_) | SessionError::Closed(_) => acp::ErrorCode::ResourceNotFound,
        SessionError::UnknownModel { .. }
        | SessionError::Setting(_)
        | SessionError::ModelTooSmall { .. }
        | SessionError::Busy(_)
        | SessionError::Workspace(_)
        | SessionError::StoredWorkspace { .. }
        | SessionError::RefusedElsewhere { .. }
        | SessionError::Store(StoreError::InvalidCursor(_)) => acp::ErrorCode::InvalidParams,
        // A missing or refused key: editors show their login flow for this code.
        SessionError::Model(LlmError::MissingKey { .. } | LlmError::Unauthorized { .. })
        | SessionError::Turn(TurnError::Model(LlmError::MissingKey { .. } | LlmError::Unauthorized { .. })) => {
            acp::ErrorCode::AuthRequired
        }
        SessionError::Store(_) | SessionError::Turn(_) | SessionError::Model(_) | SessionError::Elsewhere { .. } => {
            acp::ErrorCode::InternalError
        }
    };
    let error = acp::Error::new(code.into(), err.to_string());
    match err {
        SessionError::Store(StoreError::Leased(holder)) => error.data(serde_json::json!({
            "sessionId": holder.session.as_str(),
            "holder": {
                "pid": holder.pid,
                "host": holder.host,
                "since": crate::ids::iso8601(holder.since),
                "heartbeat": crate::ids::iso8601(holder.heartbeat),
            },
        })),
        SessionError::NotFound(id)
        | SessionError::Closed(id)
        | SessionError::Busy(id)
        | SessionError::Elsewhere { session: id, .. }
        | SessionError::RefusedElsewhere { session: id, .. } => {
            error.data(serde_json::json!({ "sessionId": id.as_str() }))
        }
        SessionError::StoredWorkspace { session, refused } => {
            error.data(serde_json::json!({ "sessionId": session.as_str(), "directory": refused.dir }))
        }
        SessionError::Workspace(refused) => error.data(serde_json::json!({ "directory": refused.dir })),
        _ => error,
    }
}

/// The client's MCP servers as cairn starts them, and a note for each it cannot use (SSE, which
/// cairn does not speak; it advertises `mcpCapabilities.sse: false`).
pub fn mcp_servers(servers: Vec<acp::McpServer>) -> (Vec<ServerConfig>, Vec<String>) {
    let mut configs = Vec::new();
    let mut notes = Vec::new();
    for server in servers {
        match server {
            acp::McpServer::Stdio(stdio) => configs.push(
                ServerConfig::stdio(stdio.name, stdio.command.to_string_lossy(), stdio.args)
                    .with_env(stdio.env.into_iter().map(|var| (var.name, var.value)).collect()),
            ),
            acp::McpServer::Http(http) => configs.push(ServerConfig::http(
                http.name,
                http.url,
                http.headers.into_iter().map(|header| (header.name, header.value)).collect(),
            )),
            acp::McpServer::Sse(sse) => notes.push(format!(
                "MCP server `{}` was left out: it uses the SSE transport, which cairn does not support; give its streamable HTTP endpoint instead.",
                sse.name
            )),
            _ => notes.push("An MCP server of a transport cairn does not know was left out.".to_owned()),
        }
    }
    (configs, notes)
}

/// The editor's `systemPrompt` on `method` as the session keeps it: text blocks only (the one
/// kind the capability covers), joined by blank lines, in a mode cairn supports.
pub fn client_prompt(method: &str, prompt: Option<acp::SystemPrompt>) -> Result<Option<ClientPrompt>, acp::Error> {
    let Some(prompt) = prompt else { return Ok(None) };
    let mode = match prompt.mode {
        acp::SystemPromptMode::Append => ClientMode::Append,
        acp::SystemPromptMode::Override => ClientMode::Override,
        other => {
            let name =
                serde_json::to_value(&other).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            return Err(invalid_params(format!(
                "{method}: `systemPrompt.mode` `{name}` is not supported; cairn takes `append` or `override`"
            )));
        }
    };
    if prompt.content.is_empty() {
        return Err(invalid_params(format!(
            "{method}: `systemPrompt.content` is empty; send at least one text block, or leave `systemPrompt` out"
        )));
    }
    let mut texts = Vec::with_capacity(prompt.content.len());
    for (at, block) in prompt.content.into_iter().enumerate() {
        match block {
            acp::ContentBlock::Text(text) => texts.push(text.text),
            _ => {
                return Err(invalid_params(format!(
                    "{method}: `systemPrompt.content[{at}]` is not a text block; a system prompt takes text only"
                )));
            }
        }
    }
    Ok(Some(ClientPrompt { mode, text: texts.join("\n\n") }))
}

/// The slash commands offered, as `available_commands_update`.
pub fn available_commands(commands: &[crate::session::Advertised]) -> acp::SessionUpdate {
    let commands = commands
        .iter()
        .map(|command| {
            acp::AvailableCommand::new(command.name.clone(), command.description.clone()).input(
                command
                    .hint
                    .clone()
                    .map(|hint| acp::AvailableCommandInput::Unstructured(acp::UnstructuredCommandInput::new(hint))),
            )
        })
        .collect();
    acp::SessionUpdate::AvailableCommandsUpdate(acp::AvailableCommandsUpdate::new(commands))
}
