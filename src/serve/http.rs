//! The HTTP surface: routes, authorization, body bounds, answers.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State as Ext};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio::io::AsyncWriteExt;

use super::error::ApiError;
use super::run::{self, Applied, Job};
use super::State;
use crate::Outcome;

pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/v1/runs", post(runs))
        .route("/v1/sessions", post(super::session_http::create))
        .route("/v1/sessions/{id}/exec", post(super::session_http::exec))
        .route(
            "/v1/sessions/{id}/changes",
            post(super::session_http::changes),
        )
        .route(
            "/v1/sessions/{id}/checkpoint",
            post(super::session_http::checkpoint),
        )
        .route(
            "/v1/sessions/{id}/rollback",
            post(super::session_http::rollback),
        )
        .route(
            "/v1/sessions/{id}/commit",
            post(super::session_http::commit),
        )
        .route(
            "/v1/sessions/{id}",
            axum::routing::delete(super::session_http::delete),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .fallback(|| async { ApiError::not_found("no such path") })
        .layer(axum::middleware::from_fn_with_state(state.clone(), gate))
        .with_state(state)
}

/// The token, checked from the request's head before any handler runs
/// (so before any body is read), on every path but the probes.
async fn gate(Ext(state): Ext<Arc<State>>, req: Request, next: axum::middleware::Next) -> Response {
    if !matches!(req.uri().path(), "/healthz" | "/readyz") {
        if let Err(e) = authorize(&state, req.headers()) {
            state.metrics.rejected(e.code);
            return e.into_response();
        }
    }
    next.run(req).await
}

/// A JSON text as a body.
pub fn json_body(v: &serde_json::Value) -> Body {
    Body::from(v.to_string())
}

fn json(status: StatusCode, v: &serde_json::Value) -> Response {
    let mut r = (status, json_body(v)).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The outcome with what was applied.
pub fn result_json(o: &Outcome, applied: &Applied) -> serde_json::Value {
    let mut v = serde_json::to_value(o).unwrap_or_default();
    v["applied"] = applied.to_json();
    if let Some(w) = applied.workspace.as_ref().and_then(|w| w.to_json()) {
        v["workspace"] = w;
    }
    v
}

/// The bearer token, compared in constant time (for equal lengths; the
/// length of the token is not a secret worth hiding).
fn authorize(state: &State, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(want) = &state.token else {
        return Ok(());
    };
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or_default();
    if constant_time_eq(given, want) {
        Ok(())
    } else {
        Err(ApiError::unauthorized())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

async fn runs(Ext(state): Ext<Arc<State>>, req: Request) -> Response {
    match run_request(&state, req).await {
        Ok(r) => r,
        Err(e) => {
            state.metrics.rejected(e.code);
            e.into_response()
        }
    }
}

async fn run_request(state: &Arc<State>, req: Request) -> Result<Response, ApiError> {
    let stream = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains("application/x-ndjson")));
    let body = read_body(state, req).await?;
    let mut parsed = super::request::parse(&body, state.max.files)?;
    drop(body);
    let (mut policy, mut applied) = run::policy_for(state, &parsed, stream)?;
    let held = super::workspace::apply(&state.bases, parsed.workspace.take(), &mut policy)?;
    applied.workspace = held.ask.is_some().then(|| Arc::new(held));
    let (admission, permit) = run::admit(state).await?;
    let mut started = run::start(Job {
        state: state.clone(),
        policy,
        profile: applied.profile.clone(),
        files: parsed.files,
        stdin: parsed.stdin.is_some(),
        stream,
        admission,
        permit,
        workspace: applied.workspace.clone(),
    })
    .await?;
    applied.pool = Some(started.pool);
    if let (Some(f), Some(data)) = (started.stdin.take(), parsed.stdin) {
        tokio::spawn(async move {
            if let Ok(mut tx) = tokio::net::unix::pipe::Sender::from_file(f) {
                // A payload that exits without reading: EPIPE, fine.
                let _ = tx.write_all(&data).await;
            }
        });
    }
    if stream {
        let mut r = Response::new(Body::from_stream(super::stream::lines(started, applied)));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        return Ok(r);
    }
    let outcome = (&mut started.done)
        .await
        .map_err(|_| ApiError::internal("the run ended without an outcome"))?
        .map_err(ApiError::internal)?;
    started.guard.disarm();
    Ok(json(StatusCode::OK, &result_json(&outcome, &applied)))
}

/// A request's body, bounded by `--max-body` (413 above it).
pub async fn read_body(state: &State, req: Request) -> Result<axum::body::Bytes, ApiError> {
    let max = state.max.body;
    let too_large = || ApiError::too_large(format!("body: larger than {max} bytes"));
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(too_large());
    }
    // The head was in time (--header-timeout) and held the token; the
    // body gets a minute (or --header-timeout, when longer).
    let within = state.max.connections.head.max(BODY_WITHIN_AT_LEAST);
    match tokio::time::timeout(within, axum::body::to_bytes(req.into_body(), max as usize)).await {
        Ok(r) => r.map_err(|_| too_large()),
        Err(_) => Err(ApiError::request_timeout(format!(
            "body: not all received within {within:?}"
        ))),
    }
}

/// The least time a body is given to arrive.
const BODY_WITHIN_AT_LEAST: std::time::Duration = std::time::Duration::from_secs(60);

async fn healthz(Ext(state): Ext<Arc<State>>) -> Response {
    let draining = state.draining.load(Ordering::SeqCst);
    // Without its spawner the server cannot start a jail, and a server that
    // confined itself cannot start a new one: unhealthy, to be restarted.
    let spawner = crate::spawner::alive();
    let status = match (spawner, draining) {
        (false, _) => "spawner_gone",
        (true, true) => "draining",
        (true, false) => "ok",
    };
    json(
        if spawner {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        &serde_json::json!({
            "status": status,
            "spawner": spawner,
            "version": env!("CARGO_PKG_VERSION"),
            "confinement": state.confinement,
            "profiles": state.profiles.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            "max_concurrent": state.max.concurrent,
            "max_queue": state.max.queue,
        }),
    )
}

async fn readyz(Ext(state): Ext<Arc<State>>) -> Response {
    if state.draining.load(Ordering::SeqCst) {
        return ApiError::shutting_down().into_response();
    }
    let warm = state.pool.warm();
    let spawner = crate::spawner::alive();
    let ready = warm && spawner;
    let body = serde_json::json!({ "ready": ready, "pools_warm": warm, "spawner": spawner });
    if ready {
        return json(StatusCode::OK, &body);
    }
    let mut r = json(StatusCode::SERVICE_UNAVAILABLE, &body);
    r.headers_mut().insert(
        axum::http::header::RETRY_AFTER,
        axum::http::HeaderValue::from(1u32),
    );
    r
}

async fn metrics(Ext(state): Ext<Arc<State>>) -> Response {
    let mut text = state.metrics.render(&state.pool.stats());
    text.push_str(&state.sessions.render());
    let mut r = text.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn constant_time_eq() {
        assert!(super::constant_time_eq(b"abc", b"abc"));
        assert!(!super::constant_time_eq(b"abc", b"abd"));
        assert!(!super::constant_time_eq(b"abc", b"abcd"));
    }
}
