//! The editor as the approver of `approval: ask` tools: each call waits for the client's
//! answer to `session/request_permission`, with the options reel logs.

use agent_client_protocol::{
    Client,
    v1::{
        ConnectionTo,
        schema::{
            PermissionOption, PermissionOptionKind, RequestPermissionOutcome,
            RequestPermissionRequest, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
        },
    },
};
use reel_engine::{ApprovalOption, ApprovalRequest, Approver};

use crate::updates::arguments;

/// Asks the client of one session.
pub struct ClientApprover {
    connection: ConnectionTo<Client>,
    session_id: String,
}

impl ClientApprover {
    pub fn new(connection: ConnectionTo<Client>, session_id: &str) -> Self {
        Self {
            connection,
            session_id: session_id.to_owned(),
        }
    }
}

#[async_trait::async_trait]
impl Approver for ClientApprover {
    async fn ask(&self, request: ApprovalRequest<'_>) -> Option<ApprovalOption> {
        let tool_call = ToolCallUpdate::new(
            request.tool_call_id.to_owned(),
            ToolCallUpdateFields::new()
                .title(request.tool_name.to_owned())
                .status(ToolCallStatus::Pending)
                .raw_input(arguments(request.arguments)),
        );
        let options = ApprovalOption::ALL
            .iter()
            .map(|option| {
                let (name, kind) = match option {
                    ApprovalOption::AllowOnce => ("Allow", PermissionOptionKind::AllowOnce),
                    ApprovalOption::AllowAlways => {
                        ("Always allow", PermissionOptionKind::AllowAlways)
                    }
                    ApprovalOption::RejectOnce => ("Reject", PermissionOptionKind::RejectOnce),
                };
                PermissionOption::new(option.as_str(), name, kind)
            })
            .collect();
        let asked = RequestPermissionRequest::new(self.session_id.clone(), tool_call, options);
        match self.connection.send_request(asked).block_task().await {
            Ok(answer) => match answer.outcome {
                RequestPermissionOutcome::Selected(selected) => {
                    let chosen = ApprovalOption::parse(&selected.option_id.0);
                    if chosen.is_none() {
                        tracing::warn!(
                            "acp: the client chose {:?}, not one of the options; taken as cancelled",
                            selected.option_id.0
                        );
                    }
                    chosen
                }
                _ => None,
            },
            Err(error) => {
                tracing::warn!("acp: the permission request failed ({error}); taken as cancelled");
                None
            }
        }
    }
}
