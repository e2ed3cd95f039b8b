//! The session routes: `POST /v1/sessions`, `POST /v1/sessions/{id}/exec`
//! (JSON, or ndjson events as they come with `Accept:
//! application/x-ndjson`), `DELETE /v1/sessions/{id}`, and a session's
//! workspace requests: `POST /v1/sessions/{id}/changes`, `checkpoint`,
//! `rollback`, `commit` (`session::workspace`).

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State as Ext};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::error::ApiError;
use super::http::{json_body, read_body};
use super::session::{self, Open};
use super::State;

fn json(status: StatusCode, v: &Value) -> Response {
    let mut r = (status, json_body(v)).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn answer(state: &State, r: Result<Response, ApiError>) -> Response {
    r.unwrap_or_else(|e| {
        state.metrics.rejected(e.code);
        e.into_response()
    })
}

pub async fn create(Ext(state): Ext<Arc<State>>, req: Request) -> Response {
    let r = create_session(&state, req).await;
    answer(&state, r)
}

async fn create_session(state: &Arc<State>, req: Request) -> Result<Response, ApiError> {
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::shutting_down());
    }
    let body = read_body(state, req).await?;
    let c = session::parse_create(&body, state)?;
    let id = crate::session::policy::new_id();
    let (policy, applied, ws) = session::policy(state, &c, &id)?;
    let shown = ws.shown.clone();
    let (st, sid, files) = (state.clone(), id.clone(), c.run.files);
    let ready = tokio::task::spawn_blocking(move || session::open(st, policy, files, sid, ws))
        .await
        .map_err(|_| ApiError::internal("the session's thread ended early"))??;
    let mut limits = applied.to_json()["limits"].clone();
    if let Some(l) = limits.as_object_mut() {
        l.remove("timeout");
        l.remove("max_output");
    }
    let mut v = json!({
        "id": id,
        "workdir": ready["workdir"],
        "profile": applied.profile,
        "limits": limits,
        "idle_timeout": c.idle.as_secs_f64(),
        "max_lifetime": state.max.session_lifetime.as_secs_f64(),
        "clamped": applied.clamped,
    });
    if let Some(w) = shown {
        v["workspace"] = w;
    }
    if !applied.secrets.is_empty() {
        v["secrets"] = super::secrets::to_json(&applied.secrets);
    }
    Ok(json(StatusCode::CREATED, &v))
}

/// `POST /v1/sessions/{id}/changes|checkpoint|rollback|commit` (see
/// `session::workspace`): the body `{}` (or none), `{"name": …}` for a
/// checkpoint and a rollback; the answer the request's event, without
/// `event` and `id`.
async fn workspace(state: Arc<State>, id: String, op: &str, req: Request) -> Response {
    let r = workspace_request(&state, &id, op, req).await;
    answer(&state, r)
}

pub async fn changes(Ext(s): Ext<Arc<State>>, Path(id): Path<String>, req: Request) -> Response {
    workspace(s, id, "changes", req).await
}

pub async fn checkpoint(Ext(s): Ext<Arc<State>>, Path(id): Path<String>, req: Request) -> Response {
    workspace(s, id, "checkpoint", req).await
}

pub async fn rollback(Ext(s): Ext<Arc<State>>, Path(id): Path<String>, req: Request) -> Response {
    workspace(s, id, "rollback", req).await
}

pub async fn commit(Ext(s): Ext<Arc<State>>, Path(id): Path<String>, req: Request) -> Response {
    workspace(s, id, "commit", req).await
}

async fn workspace_request(
    state: &Arc<State>,
    id: &str,
    op: &str,
    req: Request,
) -> Result<Response, ApiError> {
    let open = state
        .sessions
        .get(id)
        .ok_or_else(|| ApiError::no_session(id))?;
    let body = read_body(state, req).await?;
    let mut v: Value = match body.iter().all(u8::is_ascii_whitespace) {
        true => json!({}),
        false => super::body::json(&body)?,
    };
    let Some(obj) = v.as_object_mut() else {
        return Err(ApiError::field("body", "must be a JSON object"));
    };
    if let Some(k) = obj.keys().find(|k| *k != "name") {
        return Err(ApiError::field(k.clone(), "unknown field"));
    }
    obj.insert("op".into(), json!(op));
    let r = match crate::session::workspace::parse(v.to_string().as_bytes()) {
        Some(Ok(r)) => r,
        Some(Err((_, why))) => {
            let field = why.split(':').next().unwrap_or("body").to_string();
            return Err(ApiError::field(
                field,
                why.split_once(": ").map_or(why.as_str(), |x| x.1),
            ));
        }
        None => return Err(ApiError::not_found(format!("/v1/sessions/{id}/{op}"))),
    };
    let v = tokio::task::spawn_blocking(move || open.workspace(r))
        .await
        .map_err(|_| ApiError::internal("the workspace request's thread ended early"))??;
    Ok(json(StatusCode::OK, &v))
}

pub async fn exec(Ext(state): Ext<Arc<State>>, Path(id): Path<String>, req: Request) -> Response {
    let r = exec_command(&state, &id, req).await;
    answer(&state, r)
}

async fn exec_command(state: &Arc<State>, id: &str, req: Request) -> Result<Response, ApiError> {
    let open = state
        .sessions
        .get(id)
        .ok_or_else(|| ApiError::no_session(id))?;
    let stream = req
        .headers()
        .get_all(header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains("application/x-ndjson")));
    let body = read_body(state, req).await?;
    let cid = open.next_command_id();
    let line = session::exec_line(&body, state, &cid)?;
    let rx = open.subscribe(&cid)?;
    let events = Events {
        rx,
        open: open.clone(),
        id: cid.clone(),
        done: false,
    };
    if let Err(e) = open.send(&line) {
        drop(events);
        return Err(e);
    }
    state.sessions.command_started();
    if stream {
        let mut r = Response::new(Body::from_stream(events));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        return Ok(r);
    }
    collect(events, &cid).await
}

/// The whole command's answer: its output, then how it ended.
async fn collect(mut events: Events, cid: &str) -> Result<Response, ApiError> {
    let (mut stdout, mut stderr) = (String::new(), String::new());
    while let Some(ev) = events.next().await {
        match ev["event"].as_str() {
            Some("output") if ev["stream"] == "stdout" => {
                stdout.push_str(ev["data"].as_str().unwrap_or_default())
            }
            Some("output") => stderr.push_str(ev["data"].as_str().unwrap_or_default()),
            Some("exit") => {
                let mut v = ev.clone();
                if let Some(o) = v.as_object_mut() {
                    o.remove("event");
                    o.insert("stdout".into(), stdout.into());
                    o.insert("stderr".into(), stderr.into());
                }
                return Ok(json(StatusCode::OK, &v));
            }
            Some("end") => {
                let mut e = ApiError::session_ended();
                e.message = format!(
                    "the session ended while {cid} ran: {}",
                    ev["reason"].as_str().unwrap_or("?")
                );
                return Err(e);
            }
            _ if ev["error"]["code"] == "busy" => return Err(ApiError::busy()),
            _ => {
                let msg = ev["error"]["message"].as_str().unwrap_or("exec failed");
                return Err(ApiError::internal(msg.to_string()));
            }
        }
    }
    Err(ApiError::session_ended())
}

pub async fn delete(Ext(state): Ext<Arc<State>>, Path(id): Path<String>) -> Response {
    let r = async {
        let open = state
            .sessions
            .get(&id)
            .ok_or_else(|| ApiError::no_session(&id))?;
        let mut end = open.close().await;
        if let Some(o) = end.as_object_mut() {
            o.remove("event");
        }
        Ok(json(StatusCode::OK, &end))
    }
    .await;
    answer(&state, r)
}

/// One command's events; dropped before its end (the client went away),
/// the command is interrupted.
struct Events {
    rx: super::mailbox::Receiver,
    open: Arc<Open>,
    id: String,
    done: bool,
}

impl Events {
    async fn next(&mut self) -> Option<Value> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Value>> {
        if self.done {
            return Poll::Ready(None);
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(ev)) => {
                let e = ev["event"].as_str().unwrap_or_default();
                self.done = matches!(e, "exit" | "error" | "end");
                Poll::Ready(Some(ev))
            }
            Poll::Ready(None) => {
                self.done = true;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        if !self.done {
            self.open.abandon(&self.id);
        }
    }
}

impl futures_core::Stream for Events {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_event(cx).map(|o| {
            o.map(|ev| {
                let mut s = ev.to_string();
                s.push('\n');
                Ok(Bytes::from(s))
            })
        })
    }
}
