//! The live notebook for people (`EngineConfig::notebook`, docs/notebook.md): each cell that
//! ran, was cancelled before it ran or could not run is recorded and the notebook rewritten
//! off the async threads; a failed write is logged and tried again after the next cell.

use super::*;

impl Runner {
    /// Adds a cell that ran to the live notebook and writes it.
    pub(super) async fn note_cell(
        &mut self,
        code: &str,
        outcome: &Outcome,
        outputs: Option<CellOutputs>,
    ) {
        let Some(notebook) = &mut self.notebook else {
            return;
        };
        let agents = match &self.config.agents {
            Some(supervisor) => {
                crate::engine::notebook::agents_started_by(&supervisor.agents_dir(), outcome.cell)
            }
            None => Vec::new(),
        };
        notebook.record(code, outcome, outputs, &agents);
        self.write_notebook().await;
    }

    /// Adds a cell cancelled before it ran to the live notebook.
    pub(super) async fn note_never_ran(&mut self, request: &Request) {
        let Some(notebook) = &mut self.notebook else {
            return;
        };
        let outcome = Outcome {
            cell: request.number,
            ..cell::never_ran()
        };
        notebook.record(&request.code, &outcome, None, &[]);
        self.write_notebook().await;
    }

    /// Adds a cell the engine could not run to the live notebook.
    pub(super) async fn note_not_run(&mut self, request: &Request, error: &EngineError) {
        let Some(notebook) = &mut self.notebook else {
            return;
        };
        notebook.record_not_run(request.number, &request.code, &error.to_string());
        self.write_notebook().await;
    }

    /// Writes the live notebook off the async threads. A failed write is logged and tried
    /// again after the next cell (the notebook in memory keeps every cell).
    pub(super) async fn write_notebook(&self) {
        let Some(notebook) = &self.notebook else {
            return;
        };
        let bytes = notebook.to_bytes();
        let path = notebook.path().to_path_buf();
        let written =
            tokio::task::spawn_blocking(move || crate::engine::notebook::write(&path, &bytes))
                .await;
        match written {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(error = %format!("{error:#}"), "cannot write the notebook")
            }
            Err(error) => tracing::warn!(%error, "the notebook writer failed"),
        }
    }
}

/// The kernel the live notebook names, from the configuration (nbclient and viewers start it
/// by this name).
pub(super) fn notebook_kernel(config: &EngineConfig) -> crate::engine::notebook::KernelInfo {
    if let Some(spec) = &config.kernel.kernelspec {
        return crate::engine::notebook::KernelInfo {
            name: spec.name.clone(),
            display_name: spec.display_name.clone(),
            language: spec.language.clone(),
        };
    }
    if let Some(server) = &config.kernel.remote
        && !server.kernel_name.starts_with("python")
    {
        return crate::engine::notebook::KernelInfo {
            name: server.kernel_name.clone(),
            display_name: server.kernel_name.clone(),
            language: server.kernel_name.clone(),
        };
    }
    crate::engine::notebook::KernelInfo::default()
}
