"""As-Stream (seed 002): bottleneck identification, plan generation and predictive pre-scaling.

The pure core of issue 17, in the loop's stages: `inputs` (what a collector gives: per-stage
monitoring samples and the topology of stages), `bottleneck` (evaluate: Eq. 4–8 and the
bottleneck level table), `plan` (decide: Eq. 9 as a selectable planning policy), `prediction`
(evaluate/decide: Eq. 10–11 and the pre-scale `Decision` a `Realizer` can apply), `options`
(`AsStreamOptions`, every threshold typed, defaulted and described); and the loop that runs
them per stage: `job` (collect: a `JobSnapshot`), `policies` (decide: As-Stream, reactive,
together), `loop` (`StagesLoop`: collect -> evaluate -> decide -> realize for every stage), `simulation` (a
fluid model of a chain of micro-batch stages that the same loop drives).
"""

from elasticity.control.asstream.bottleneck import (
    BottleneckInterval,
    BottleneckReport,
    EffectiveBottleneckValue,
    LatencyLine,
    StageBottleneck,
    StageCost,
    bottleneck_intervals,
    communication_time,
    effective_values,
    fit_latency_line,
    identify_bottlenecks,
    identify_stage,
    reference_time,
)
from elasticity.control.asstream.inputs import StageLink, StageMonitoring, StageSample, Topology, by_stage
from elasticity.control.asstream.job import JobSnapshot, StageBatch, StageView, stage_batches
from elasticity.control.asstream.loop import (
    JobCollector,
    RecordingStagesRealizer,
    StagesLoop,
    StagesLoopState,
    StagesRealizer,
)
from elasticity.control.asstream.options import AsStreamOptions, StagesOptions
from elasticity.control.asstream.plan import (
    ParameterPlanPolicy,
    PlanningPolicy,
    StageParallelism,
    StagePlan,
    parameter_plan,
    plan_stages,
    planning_policy,
)
from elasticity.control.asstream.policies import (
    AsStreamPolicy,
    ReactivePolicy,
    StageDecision,
    StagePolicy,
    TogetherPolicy,
    stage_policy,
)
from elasticity.control.asstream.prediction import (
    InputPrediction,
    StagePrediction,
    channels_needed,
    mean_selectivity,
    pre_scale,
    predict_next_inputs,
    predicted_output,
)

__all__ = [
    "AsStreamPolicy",
    "JobCollector",
    "JobSnapshot",
    "ReactivePolicy",
    "RecordingStagesRealizer",
    "StageBatch",
    "StageDecision",
    "StagePolicy",
    "StageView",
    "StagesLoop",
    "StagesLoopState",
    "StagesOptions",
    "StagesRealizer",
    "TogetherPolicy",
    "stage_batches",
    "stage_policy",
    "AsStreamOptions",
    "BottleneckInterval",
    "BottleneckReport",
    "EffectiveBottleneckValue",
    "InputPrediction",
    "LatencyLine",
    "ParameterPlanPolicy",
    "PlanningPolicy",
    "StageBottleneck",
    "StageCost",
    "StageLink",
    "StageMonitoring",
    "StageParallelism",
    "StagePlan",
    "StagePrediction",
    "StageSample",
    "Topology",
    "bottleneck_intervals",
    "by_stage",
    "channels_needed",
    "communication_time",
    "effective_values",
    "fit_latency_line",
    "identify_bottlenecks",
    "identify_stage",
    "mean_selectivity",
    "parameter_plan",
    "plan_stages",
    "planning_policy",
    "pre_scale",
    "predict_next_inputs",
    "predicted_output",
    "reference_time",
]
