//! [`FileSpanExporter`]: the SDK exporter that appends each batch of spans to a file as one line
//! of OTLP JSON.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use super::OtlpError;
use super::proto::ExportTraceServiceRequest;

/// An OpenTelemetry SDK `SpanExporter` that appends each batch to a file as one OTLP JSON
/// `ExportTraceServiceRequest` per line.
///
/// See the [module example](crate::observe::otlp#examples).
pub struct FileSpanExporter {
    path: PathBuf,
    out: Mutex<Option<BufWriter<File>>>,
    resource: ResourceAttributesWithSchema,
}

impl fmt::Debug for FileSpanExporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileSpanExporter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FileSpanExporter {
    /// Export to `path`, replacing what it held.
    ///
    /// # Errors
    /// The file cannot be created; the error names it.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn create(path: impl AsRef<Path>) -> Result<Self, OtlpError> {
        Self::open(path.as_ref(), false)
    }

    /// Export to `path`, after what it already holds (created if absent).
    ///
    /// # Errors
    /// The file cannot be opened; the error names it.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn append(path: impl AsRef<Path>) -> Result<Self, OtlpError> {
        Self::open(path.as_ref(), true)
    }

    fn open(path: &Path, append: bool) -> Result<Self, OtlpError> {
        let mut options = OpenOptions::new();
        if append {
            options.append(true).create(true);
        } else {
            options.write(true).create(true).truncate(true);
        }
        let file = options.open(path).map_err(|e| {
            OtlpError::new(
                format!("cannot open OTLP trace file {}: {e}", path.display()),
                e,
            )
        })?;
        Ok(Self {
            path: path.to_owned(),
            out: Mutex::new(Some(BufWriter::new(file))),
            resource: ResourceAttributesWithSchema::default(),
        })
    }

    /// The file it writes.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The request one batch becomes: the line [`SpanExporter::export`] writes.
    ///
    /// See the [module example](crate::observe::otlp#examples).
    pub fn to_request(&self, batch: Vec<SpanData>) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        }
    }

    fn failure(&self, what: impl fmt::Display) -> OTelSdkError {
        OTelSdkError::InternalFailure(format!("OTLP trace file {}: {what}", self.path.display()))
    }

    fn write_line(&self, request: &ExportTraceServiceRequest) -> OTelSdkResult {
        let mut guard = self
            .out
            .lock()
            .map_err(|_| self.failure("writer poisoned"))?;
        let out = guard.as_mut().ok_or(OTelSdkError::AlreadyShutdown)?;
        serde_json::to_writer(&mut *out, request).map_err(|e| self.failure(e))?;
        // Flush per batch so a reader never sees half a line.
        out.write_all(b"\n")
            .and_then(|()| out.flush())
            .map_err(|e| self.failure(e))
    }
}

impl SpanExporter for FileSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        if batch.is_empty() {
            return Ok(());
        }
        let request = self.to_request(batch);
        self.write_line(&request)
    }

    fn force_flush(&self) -> OTelSdkResult {
        let mut guard = self
            .out
            .lock()
            .map_err(|_| self.failure("writer poisoned"))?;
        match guard.as_mut() {
            Some(out) => out.flush().map_err(|e| self.failure(e)),
            None => Ok(()),
        }
    }

    fn shutdown_with_timeout(&self, _timeout: std::time::Duration) -> OTelSdkResult {
        let mut guard = self
            .out
            .lock()
            .map_err(|_| self.failure("writer poisoned"))?;
        match guard.take() {
            Some(mut out) => out.flush().map_err(|e| self.failure(e)),
            None => Ok(()),
        }
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}
