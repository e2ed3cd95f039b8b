//! The server's errors as HTTP answers: `{"error": {"code", "message"}}`
//! (and `"field"` for a bad request field) with the status that fits.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// One refused request.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable, machine-readable: `bad_request`, `unauthorized`, `not_found`,
    /// `unknown_profile`, `method_not_allowed`, `payload_too_large`,
    /// `request_timeout`,
    /// `queue_full`, `too_many_sessions`, `busy`, `session_ended`,
    /// `shutting_down`, `internal`; a session's workspace requests add
    /// `no_checkpoint`, `commit_refused`, `no_overlay`, `workspace_failed`.
    pub code: &'static str,
    pub message: String,
    /// The request field at fault (400 only).
    pub field: Option<String>,
    /// Seconds, sent as `Retry-After` (429, 503).
    pub retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// 400, naming the field: the message is `FIELD: WHY`.
    pub fn field(field: impl Into<String>, why: impl std::fmt::Display) -> ApiError {
        let field = field.into();
        let mut e = ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("{field}: {why}"),
        );
        e.field = Some(field);
        e
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a valid `Authorization: Bearer TOKEN` header is required",
        )
    }

    pub fn not_found(what: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", what)
    }

    pub fn unknown_profile(name: &str, allowed: &[String]) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_profile",
            format!(
                "profile: {name:?} is not served here (allowed: {})",
                allowed.join(", ")
            ),
        );
        e.field = Some("profile".into());
        e
    }

    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "method not allowed on this path",
        )
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
    }

    /// 408: the body did not arrive in time.
    pub fn request_timeout(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::REQUEST_TIMEOUT, "request_timeout", message)
    }

    pub fn queue_full(limit: usize) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "queue_full",
            format!("every run slot is busy and {limit} requests are already waiting"),
        );
        e.retry_after = Some(1);
        e
    }

    /// 429: `--max-sessions` are open.
    pub fn too_many_sessions(limit: usize) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_sessions",
            format!("{limit} sessions are open, the most this server keeps (--max-sessions)"),
        );
        e.retry_after = Some(1);
        e
    }

    /// 409: the session runs a command already.
    pub fn busy() -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "busy",
            "the session runs a command; commands run one at a time",
        )
    }

    /// 404: a session that ended (or never was).
    pub fn no_session(id: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no open session {id:?}"),
        )
    }

    /// 410: the session ended while the request was made.
    pub fn session_ended() -> ApiError {
        ApiError::new(StatusCode::GONE, "session_ended", "the session has ended")
    }

    pub fn shutting_down() -> ApiError {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "the server is shutting down",
        );
        e.retry_after = Some(1);
        e
    }

    /// A session's workspace request refused (`session::workspace`'s
    /// codes): 400 a bad name, 404 no such checkpoint, 403 a commit the
    /// base does not allow, 409 a command running or no overlay, 500 the
    /// layers could not be read or written.
    pub fn workspace(code: &str, message: impl Into<String>) -> ApiError {
        let (status, code) = match code {
            "bad_request" => (StatusCode::BAD_REQUEST, "bad_request"),
            "no_checkpoint" => (StatusCode::NOT_FOUND, "no_checkpoint"),
            "commit_refused" => (StatusCode::FORBIDDEN, "commit_refused"),
            "busy" => (StatusCode::CONFLICT, "busy"),
            "no_overlay" => (StatusCode::CONFLICT, "no_overlay"),
            "session_ended" => (StatusCode::GONE, "session_ended"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "workspace_failed"),
        };
        ApiError::new(status, code, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }

    pub fn to_json(&self) -> serde_json::Value {
        let mut inner = serde_json::json!({ "code": self.code, "message": self.message });
        if let Some(f) = &self.field {
            inner["field"] = f.clone().into();
        }
        serde_json::json!({ "error": inner })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, super::http::json_body(&self.to_json())).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(s) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}
