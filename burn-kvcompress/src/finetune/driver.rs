//! [`run_finetune`]: the training loop shared by every artifact, with held-out evaluation and
//! early stopping.

use std::time::Instant;

use rand::{rngs::StdRng, seq::SliceRandom, SeedableRng};
use serde::{Deserialize, Serialize};

use super::FinetuneError;

/// How long and how fast to train.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FinetuneConfig {
    /// Most optimizer steps (each visits every layer once).
    pub steps: usize,
    /// Step size of the optimizer.
    pub learning_rate: f64,
    /// Training windows per step (drawn without replacement, reshuffled every pass).
    pub windows_per_step: usize,
    /// Steps between held-out evaluations (the starting point is evaluated first).
    pub eval_every: usize,
    /// Stop after this many evaluations in a row without a new best held-out loss.
    pub patience: usize,
    /// Seed of the window order.
    pub seed: u64,
    /// Wall-clock budget in seconds: no step starts after it is spent (the last steps are then
    /// evaluated on held-out windows as usual). `None`: no limit.
    #[serde(default)]
    pub time_limit: Option<f64>,
}

impl Default for FinetuneConfig {
    fn default() -> Self {
        Self {
            steps: 200,
            learning_rate: 1e-3,
            windows_per_step: 2,
            eval_every: 10,
            patience: 4,
            seed: 0,
            time_limit: None,
        }
    }
}

impl FinetuneConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), FinetuneError> {
        if self.windows_per_step == 0 || self.eval_every == 0 || self.patience == 0 {
            return Err(FinetuneError::Config(
                "windows per step, eval interval and patience must be at least 1".into(),
            ));
        }
        if self.time_limit.is_some_and(|t| t.is_nan() || t < 0.0) {
            return Err(FinetuneError::Config("the time limit must be a number of seconds".into()));
        }
        if !(self.learning_rate > 0.0 && self.learning_rate.is_finite()) {
            return Err(FinetuneError::Config(format!("learning rate {} is not positive", self.learning_rate)));
        }
        Ok(())
    }
}

/// What a training loop drives: an artifact with a layer-wise loss on training and held-out
/// samples.
pub trait Objective {
    /// The artifact's error.
    type Error: From<FinetuneError>;
    /// What training changes (the loop keeps a copy of the best).
    type Parameters: Clone;

    /// One optimizer step on the training windows `windows`; returns the loss before the step
    /// (mean over layers).
    fn step(&mut self, windows: &[usize], learning_rate: f64) -> Result<f64, Self::Error>;

    /// The held-out loss of the current parameters (mean over layers).
    fn held_out_loss(&mut self) -> Result<f64, Self::Error>;

    /// The current parameters.
    fn parameters(&self) -> &Self::Parameters;

    /// Replaces the parameters (the optimizer state is kept).
    fn set_parameters(&mut self, parameters: Self::Parameters);
}

/// Where a run is, for progress bars.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FinetuneProgress {
    /// Steps done.
    pub step: usize,
    /// Most steps.
    pub steps: usize,
    /// The last step's training loss.
    pub train_loss: f64,
    /// The best held-out loss so far.
    pub best_held_out: f64,
}

/// How a run went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinetuneReport {
    /// The settings.
    pub config: FinetuneConfig,
    /// Per step, the training loss before its update.
    pub train_loss: Vec<f64>,
    /// `(steps done, held-out loss)` at every evaluation, the first at 0 steps (the starting point).
    pub evaluations: Vec<(usize, f64)>,
    /// Steps done when the best held-out loss was reached (the parameters returned).
    pub best_step: usize,
    /// Held-out loss of the starting point.
    pub initial_held_out: f64,
    /// Best held-out loss (that of the returned parameters).
    pub best_held_out: f64,
    /// Whether the patience ran out before `steps`.
    pub stopped_early: bool,
    /// Whether the time limit ended the run before `steps`.
    pub out_of_time: bool,
    /// Wall-clock seconds.
    pub seconds: f64,
}

impl FinetuneReport {
    /// One point per evaluation: the mean training loss of the steps since the previous one
    /// (at the first, the first step's loss, taken at the starting point) and the held-out
    /// loss. For loss curves.
    pub fn curves(&self) -> (Vec<f64>, Vec<f64>) {
        let mut train = Vec::with_capacity(self.evaluations.len());
        let mut previous = 0;
        for &(step, _) in &self.evaluations {
            let losses = match step {
                0 => &self.train_loss[..self.train_loss.len().min(1)],
                _ => &self.train_loss[previous..step],
            };
            train.push(losses.iter().sum::<f64>() / losses.len().max(1) as f64);
            previous = step;
        }
        (train, self.evaluations.iter().map(|&(_, loss)| loss).collect())
    }
}

/// Trains `objective` on `train_windows` windows for at most `config.steps` steps, evaluating
/// the held-out loss every `eval_every` steps, and leaves it at the parameters with the best
/// held-out loss (the starting point included, so the result is never worse on held-out data).
pub fn run_finetune<O: Objective>(
    objective: &mut O,
    train_windows: usize,
    config: &FinetuneConfig,
    on_progress: &mut dyn FnMut(FinetuneProgress),
) -> Result<FinetuneReport, O::Error> {
    config.validate()?;
    if train_windows == 0 {
        return Err(FinetuneError::Samples("no training window".into()).into());
    }
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(config.seed);
    let mut order: Vec<usize> = Vec::new();
    let initial = objective.held_out_loss()?;
    let mut best_parameters = objective.parameters().clone();
    let (mut best, mut best_step, mut strikes) = (initial, 0, 0);
    let mut evaluations = vec![(0, initial)];
    let mut train_loss = Vec::with_capacity(config.steps);
    let (mut stopped_early, mut out_of_time) = (false, false);
    for step in 1..=config.steps {
        let last = config.time_limit.is_some_and(|limit| started.elapsed().as_secs_f64() >= limit);
        let mut windows = Vec::with_capacity(config.windows_per_step);
        while windows.len() < config.windows_per_step.min(train_windows) {
            if order.is_empty() {
                order = (0..train_windows).collect();
                order.shuffle(&mut rng);
            }
            windows.extend(order.pop());
        }
        train_loss.push(objective.step(&windows, config.learning_rate)?);
        if step % config.eval_every == 0 || step == config.steps || last {
            let loss = objective.held_out_loss()?;
            evaluations.push((step, loss));
            if loss < best {
                (best, best_step, strikes) = (loss, step, 0);
                best_parameters = objective.parameters().clone();
            } else {
                strikes += 1;
            }
        }
        on_progress(FinetuneProgress {
            step,
            steps: config.steps,
            train_loss: train_loss[step - 1],
            best_held_out: best,
        });
        if strikes >= config.patience {
            stopped_early = step < config.steps;
            break;
        }
        if last {
            out_of_time = step < config.steps;
            break;
        }
    }
    objective.set_parameters(best_parameters);
    Ok(FinetuneReport {
        config: *config,
        train_loss,
        evaluations,
        best_step,
        initial_held_out: initial,
        best_held_out: best,
        stopped_early,
        out_of_time,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 1-D quadratic whose held-out optimum differs from the training one: training overshoots
    /// the held-out optimum and early stopping must return to it.
    struct Quadratic {
        x: f64,
    }

    impl Objective for Quadratic {
        type Error = FinetuneError;
        type Parameters = f64;

        fn step(&mut self, _: &[usize], learning_rate: f64) -> Result<f64, FinetuneError> {
            let loss = (self.x - 10.0).powi(2);
            self.x -= learning_rate * 2.0 * (self.x - 10.0);
            Ok(loss)
        }

        fn held_out_loss(&mut self) -> Result<f64, FinetuneError> {
            Ok((self.x - 4.0).powi(2))
        }

        fn parameters(&self) -> &f64 {
            &self.x
        }

        fn set_parameters(&mut self, x: f64) {
            self.x = x;
        }
    }

    #[test]
    fn stops_early_and_returns_the_best_held_out_point() {
        let mut q = Quadratic { x: 0.0 };
        let config =
            FinetuneConfig { steps: 1000, learning_rate: 0.05, eval_every: 2, patience: 3, ..Default::default() };
        let report = run_finetune(&mut q, 3, &config, &mut |_| {}).unwrap();
        assert!(report.stopped_early, "{report:?}");
        assert!(report.best_held_out < report.initial_held_out);
        assert_eq!(report.best_held_out, (q.x - 4.0).powi(2), "the returned point is the best one");
        let best_evaluation = report.evaluations.iter().map(|e| e.1).fold(f64::INFINITY, f64::min);
        assert_eq!(report.best_held_out, best_evaluation);
        assert_eq!(report.evaluations.len(), report.curves().0.len());
    }

    #[test]
    fn never_returns_worse_than_the_start() {
        // The held-out optimum is the start itself: every step makes it worse.
        let mut q = Quadratic { x: 4.0 };
        let report = run_finetune(&mut q, 1, &FinetuneConfig::default(), &mut |_| {}).unwrap();
        assert_eq!(q.x, 4.0);
        assert_eq!(report.best_step, 0);
    }

    #[test]
    fn a_spent_time_limit_runs_one_step_and_evaluates_it() {
        let mut q = Quadratic { x: 0.0 };
        let config = FinetuneConfig { time_limit: Some(0.0), learning_rate: 0.05, ..Default::default() };
        let report = run_finetune(&mut q, 1, &config, &mut |_| {}).unwrap();
        assert!(report.out_of_time && !report.stopped_early);
        assert_eq!(report.train_loss.len(), 1);
        assert_eq!(report.evaluations.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn rejects_bad_settings() {
        let mut q = Quadratic { x: 0.0 };
        let zero = FinetuneConfig { eval_every: 0, ..Default::default() };
        assert!(run_finetune(&mut q, 1, &zero, &mut |_| {}).is_err());
        assert!(run_finetune(&mut q, 0, &FinetuneConfig::default(), &mut |_| {}).is_err());
    }
}
