"""Each validation rule: one spec that breaks it (and only it) and one that satisfies it.

The table is keyed by the rule's field and a word of its message; a meta-test fails when a rule has no case,
so a new rule cannot land untested.
"""

from typing import Any

import pytest

from sglang_operator.api.groups import FLEET_RULES, GroupRule
from sglang_operator.api.validation import RULES, Rule, check_rules, parse_spec
from tests.support.api.pd_autoscaling_cases import PD_AUTOSCALING_CASES
from tests.support.api.pd_cases import PD_CASES

# (field, message fragment, failing spec, passing spec)
CASES: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("spec.parallelism.tp", "at least 1", {"parallelism": {"tp": 0}}, {"parallelism": {"tp": 2}}),
    ("spec.parallelism.dp", "at least 1", {"parallelism": {"dp": 0}}, {"parallelism": {"dp": 2}}),
    ("spec.parallelism.attentionDP", "at least 1", {"parallelism": {"attentionDP": 0}},
     {"parallelism": {"tp": 2, "attentionDP": 2}}),
    ("spec.parallelism.ep", "at least 1", {"parallelism": {"ep": 0}}, {"parallelism": {"tp": 2, "ep": 2}}),
    ("spec.parallelism.nnodes", "at least 1", {"parallelism": {"nnodes": 0}},
     {"parallelism": {"tp": 2, "nnodes": 2}}),
    ("spec.resources.gpusPerNode", "at least 1", {"resources": {"gpusPerNode": 0}},
     {"resources": {"gpusPerNode": 1}}),
    ("spec.replicas", "at least 0", {"replicas": -1}, {"replicas": 0}),
    ("spec.router.replicas", "at least 1", {"router": {"replicas": 0}}, {"router": {"replicas": 2}}),
    ("spec.router.policy", "power_of_two", {"router": {"policy": "power_of_two"}},
     {"router": {"policy": "least_load"}}),
    ("spec.engine.maxRunningRequests", "at least 1", {"engine": {"maxRunningRequests": 0}},
     {"engine": {"maxRunningRequests": 8}}),
    ("spec.engine.contextLength", "at least 1", {"engine": {"contextLength": 0}}, {"engine": {"contextLength": 4096}}),
    ("spec.engine.startupTimeoutSeconds", "at least 60", {"engine": {"startupTimeoutSeconds": 10}},
     {"engine": {"startupTimeoutSeconds": 600}}),
    ("spec.updateStrategy.maxSurge", "at least 0", {"updateStrategy": {"maxSurge": -1, "maxUnavailable": 1}},
     {"updateStrategy": {"maxSurge": 2}}),
    ("spec.updateStrategy.maxUnavailable", "at least 0", {"updateStrategy": {"maxUnavailable": -1}},
     {"updateStrategy": {"maxUnavailable": 1}}),
    ("spec.updateStrategy.drainTimeoutSeconds", "at least 0", {"updateStrategy": {"drainTimeoutSeconds": -5}},
     {"updateStrategy": {"drainTimeoutSeconds": 0}}),
    ("spec.autoscaling.prometheusURL", "without a query (?), a fragment (#)",
     {"autoscaling": {"prometheusURL": "http://prom:9090/api/v1/query?query=up&"}},
     {"autoscaling": {"prometheusURL": "http://prom:9090/prometheus/team-a"}}),
    ("spec.autoscaling.minReplicas", "at least 0", {"autoscaling": {"minReplicas": -1}},
     {"autoscaling": {"minReplicas": 0}}),
    ("spec.autoscaling.maxReplicas", "at least 1", {"autoscaling": {"minReplicas": 0, "maxReplicas": 0}},
     {"autoscaling": {"maxReplicas": 3}}),
    ("spec.autoscaling.warmReplicas", "at least 0", {"autoscaling": {"warmReplicas": -1}},
     {"autoscaling": {"warmReplicas": 1}}),
    ("spec.autoscaling.intervalSeconds", "at least 1", {"autoscaling": {"intervalSeconds": 0}},
     {"autoscaling": {"intervalSeconds": 5}}),
    ("spec.autoscaling.maxGPUs", "at least 1", {"autoscaling": {"minReplicas": 0, "maxGPUs": 0}},
     {"autoscaling": {"maxGPUs": 8}}),
    ("spec.autoscaling.targets.concurrencyPerReplica", "at least 1",
     {"autoscaling": {"targets": {"concurrencyPerReplica": 0}}},
     {"autoscaling": {"targets": {"concurrencyPerReplica": 16}}}),
    ("spec.autoscaling.maxScaleUpStep", "at least 1", {"autoscaling": {"maxScaleUpStep": 0}},
     {"autoscaling": {"maxScaleUpStep": 1}}),
    ("spec.autoscaling.startupSeconds", "at least 1", {"autoscaling": {"startupSeconds": 0}},
     {"autoscaling": {"startupSeconds": 300}}),
    ("spec.autoscaling.panicThreshold", "at least 1", {"autoscaling": {"panicThreshold": 0.5}},
     {"autoscaling": {"panicThreshold": 1.0}}),
    ("spec.autoscaling.scaleDownTolerance", "below 1", {"autoscaling": {"scaleDownTolerance": 1.0}},
     {"autoscaling": {"scaleDownTolerance": 0.3}}),
    ("spec.autoscaling.targets.burstHeadroom", "below 10", {"autoscaling": {"targets": {"burstHeadroom": -0.5}}},
     {"autoscaling": {"targets": {"burstHeadroom": 0.0}}}),
    ("spec.autoscaling.targets.queuePerReplica", "at least 0",
     {"autoscaling": {"targets": {"queuePerReplica": -1.0}}}, {"autoscaling": {"targets": {"queuePerReplica": 0}}}),
    ("spec.autoscaling.windows.rateSeconds", "at least 1", {"autoscaling": {"windows": {"rateSeconds": 0}}},
     {"autoscaling": {"windows": {"rateSeconds": 30}}}),
    ("spec.autoscaling.windows.slotTimeSeconds", "at least 1", {"autoscaling": {"windows": {"slotTimeSeconds": 0}}},
     {"autoscaling": {"windows": {"slotTimeSeconds": 3600}}}),
    ("spec.autoscaling.windows.burstSeconds", "at least 1", {"autoscaling": {"windows": {"burstSeconds": -30}}},
     {"autoscaling": {"windows": {"burstSeconds": 45}}}),
    ("spec.autoscaling.windows.peakLookbackSeconds", "at least 1",
     {"autoscaling": {"windows": {"peakLookbackSeconds": 0}}},
     {"autoscaling": {"windows": {"peakLookbackSeconds": 300}}}),
    ("spec.autoscaling.windows.scaleUpStabilizationSeconds", "at least 0",
     {"autoscaling": {"windows": {"scaleUpStabilizationSeconds": -1}}},
     {"autoscaling": {"windows": {"scaleUpStabilizationSeconds": 0}}}),
    ("spec.autoscaling.windows.scaleDownStabilizationSeconds", "at least 0",
     {"autoscaling": {"windows": {"scaleDownStabilizationSeconds": -60}}},
     {"autoscaling": {"windows": {"scaleDownStabilizationSeconds": 0}}}),
    ("spec.autoscaling.windows.quietScaleDownSeconds", "at least 0",
     {"autoscaling": {"windows": {"quietScaleDownSeconds": -1}}},
     {"autoscaling": {"windows": {"quietScaleDownSeconds": 0}}}),
    ("spec.autoscaling.windows.quietLookbackSeconds", "at least 1",
     {"autoscaling": {"windows": {"quietLookbackSeconds": 0}}},
     {"autoscaling": {"windows": {"quietLookbackSeconds": 1800}}}),
    ("spec.autoscaling.windows.quietMaxRise", "at least 0",
     {"autoscaling": {"windows": {"quietMaxRise": -0.5}}}, {"autoscaling": {"windows": {"quietMaxRise": 0}}}),
    ("spec.autoscaling.windows.metricsMaxAgeSeconds", "at least 1",
     {"autoscaling": {"windows": {"metricsMaxAgeSeconds": 0}}},
     {"autoscaling": {"windows": {"metricsMaxAgeSeconds": 120}}}),
    ("spec.autoscaling.burstyTraffic.threshold", "at least 1",
     {"autoscaling": {"burstyTraffic": {"threshold": 0.9}}}, {"autoscaling": {"burstyTraffic": {"threshold": 1.0}}}),
    ("spec.autoscaling.burstyTraffic.tolerance", "below 1",
     {"autoscaling": {"burstyTraffic": {"tolerance": 1.5}}}, {"autoscaling": {"burstyTraffic": {"tolerance": 0.0}}}),
    ("spec.autoscaling.burstyTraffic.rateSeconds", "at least 1",
     {"autoscaling": {"burstyTraffic": {"rateSeconds": 0}}}, {"autoscaling": {"burstyTraffic": {"rateSeconds": 1}}}),
    ("spec.autoscaling.burstyTraffic.burstSeconds", "at least 1",
     {"autoscaling": {"burstyTraffic": {"burstSeconds": -60}}},
     {"autoscaling": {"burstyTraffic": {"burstSeconds": 30}}}),
    ("spec.autoscaling.burstyTraffic.peakLookbackSeconds", "at least 1",
     {"autoscaling": {"burstyTraffic": {"peakLookbackSeconds": 0}}},
     {"autoscaling": {"burstyTraffic": {"peakLookbackSeconds": 900}}}),
    ("spec.autoscaling.burstyTraffic.scaleDownStabilizationSeconds", "at least 0",
     {"autoscaling": {"burstyTraffic": {"scaleDownStabilizationSeconds": -1}}},
     {"autoscaling": {"burstyTraffic": {"scaleDownStabilizationSeconds": 0}}}),
    ("spec.autoscaling.sustainedRise.stepSeconds", "at least 1",
     {"autoscaling": {"sustainedRise": {"stepSeconds": 0}}}, {"autoscaling": {"sustainedRise": {"stepSeconds": 15}}}),
    ("spec.autoscaling.sustainedRise.steps", "over twice", {"autoscaling": {"sustainedRise": {"steps": 0}}},
     {"autoscaling": {"sustainedRise": {"steps": 1}}}),
    ("spec.autoscaling.sustainedRise.minRise", "at least 0",
     {"autoscaling": {"sustainedRise": {"minRise": -0.05}}}, {"autoscaling": {"sustainedRise": {"minRise": 0.0}}}),
    ("spec.autoscaling.sustainedRise.projection", "1 all of it",
     {"autoscaling": {"sustainedRise": {"projection": -1}}}, {"autoscaling": {"sustainedRise": {"projection": 0}}}),
    ("spec.autoscaling.slo.queueSeconds", "at least 0", {"autoscaling": {"slo": {"queueSeconds": -1}}},
     {"autoscaling": {"slo": {"queueSeconds": 0.5}}}),
    ("spec.autoscaling.slo.quietMissRatio", "below 1", {"autoscaling": {"slo": {"quietMissRatio": 1.5}}},
     {"autoscaling": {"slo": {"quietMissRatio": 0.0}}}),
    ("spec.autoscaling.prometheusAuth.basicAuthSecretRef", "one Authorization header",
     {"autoscaling": {"prometheusAuth": {"bearerTokenSecretRef": {"name": "t"}, "basicAuthSecretRef": {"name": "b"}}}},
     {"autoscaling": {"prometheusAuth": {"basicAuthSecretRef": {"name": "b"}}}}),
    ("spec.autoscaling.prometheusAuth.headers", "credentials belong in bearerTokenSecretRef",
     {"autoscaling": {"prometheusAuth": {"headers": {"X-Scope-OrgID": "team-a", "AUTHORIZATION": "Bearer x"}}}},
     {"autoscaling": {"prometheusAuth": {"headers": {"X-Scope-OrgID": "team-a"}}}}),
    ("spec.autoscaling.prometheusAuth.insecureSkipTLSVerify", "caSecretRef",
     {"autoscaling": {"prometheusAuth": {"caSecretRef": {"name": "ca"}, "insecureSkipTLSVerify": True}}},
     {"autoscaling": {"prometheusAuth": {"caSecretRef": {"name": "ca"}}}}),
    ("spec.engine.port", "TCP port", {"engine": {"port": 70000}}, {"engine": {"port": 8000}}),
    ("spec.router.port", "TCP port", {"router": {"port": 0}}, {"router": {"port": 8080}}),
    ("spec.router.metricsPort", "TCP port", {"router": {"metricsPort": 65536}}, {"router": {"metricsPort": 9100}}),
    ("spec.router.metricsPort", "must differ", {"router": {"port": 9000, "metricsPort": 9000}},
     {"router": {"port": 9000, "metricsPort": 9001}}),
    ("spec.parallelism.attentionDP", "divisible by attentionDP", {"parallelism": {"tp": 6, "attentionDP": 4}},
     {"parallelism": {"tp": 8, "attentionDP": 4}}),
    ("spec.parallelism.attentionDP", "cannot be combined", {"parallelism": {"tp": 4, "dp": 2, "attentionDP": 2}},
     {"parallelism": {"tp": 4, "dp": 1, "attentionDP": 2}}),
    ("spec.parallelism.dp", "cannot span nodes", {"parallelism": {"tp": 4, "dp": 2, "nnodes": 2}},
     {"parallelism": {"tp": 4, "dp": 1, "nnodes": 2}}),
    ("spec.parallelism.nnodes", "divisible by nnodes", {"parallelism": {"tp": 6, "nnodes": 4}},
     {"parallelism": {"tp": 8, "nnodes": 4}}),
    ("spec.resources.gpusPerNode", "exceed gpusPerNode", {"parallelism": {"tp": 16}},
     {"parallelism": {"tp": 16, "nnodes": 2}}),
    ("spec.parallelism.dpLmHead", "requires attentionDP", {"parallelism": {"dpLmHead": True}},
     {"parallelism": {"tp": 2, "attentionDP": 2, "dpLmHead": True}}),
    ("spec.parallelism.ep", "must divide tp", {"parallelism": {"tp": 4, "ep": 3}}, {"parallelism": {"tp": 4, "ep": 2}}),
    ("spec.parallelism.ep", "require ep == tp", {"parallelism": {"tp": 8, "ep": 4, "moeA2ABackend": "deepep"}},
     {"parallelism": {"tp": 8, "ep": 8, "moeA2ABackend": "deepep"}}),
    ("spec.model.servedName", "must not contain ':'", {"model": {"path": "m", "servedName": "llama:lora"}},
     {"model": {"path": "m", "servedName": "llama-lora"}}),
    ("spec.model.cache.claimName", "persistentVolumeClaim",
     {"model": {"path": "m", "cache": {"type": "persistentVolumeClaim"}}},
     {"model": {"path": "m", "cache": {"type": "persistentVolumeClaim", "claimName": "weights"}}}),
    ("spec.model.cache.hostPath", "hostPath", {"model": {"path": "m", "cache": {"type": "hostPath"}}},
     {"model": {"path": "m", "cache": {"type": "hostPath", "hostPath": "/models"}}}),
    ("spec.engine.memFractionStatic", "between 0 and 1", {"engine": {"memFractionStatic": 1.5}},
     {"engine": {"memFractionStatic": 0.8}}),
    ("spec.updateStrategy", "cannot both be 0", {"updateStrategy": {"maxSurge": 0, "maxUnavailable": 0}},
     {"updateStrategy": {"maxSurge": 0, "maxUnavailable": 1}}),
    ("spec.autoscaling.minReplicas", "must not exceed maxReplicas",
     {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
     {"autoscaling": {"minReplicas": 2, "maxReplicas": 2}}),
    ("spec.autoscaling.maxGPUs", "cannot hold minReplicas",
     {"parallelism": {"tp": 4}, "autoscaling": {"minReplicas": 2, "maxGPUs": 4}},
     {"parallelism": {"tp": 4}, "autoscaling": {"minReplicas": 2, "maxGPUs": 8}}),
    ("spec.autoscaling.targets.headroom", "between 0 and 10", {"autoscaling": {"targets": {"headroom": -0.1}}},
     {"autoscaling": {"targets": {"headroom": 0.5}}}),
    ("spec.autoscaling.tolerance", "between 0 and 1", {"autoscaling": {"tolerance": 1.0}},
     {"autoscaling": {"tolerance": 0.05}}),
    ("spec.autoscaling.targets.gpuUtilization", "percentage", {"autoscaling": {"targets": {"gpuUtilization": 0}}},
     {"autoscaling": {"targets": {"gpuUtilization": 80}}}),
    ("spec.router.stickySessions.headers", "at least one header",
     {"router": {"stickySessions": {"enabled": True, "headers": []}}},
     {"router": {"stickySessions": {"enabled": True, "headers": ["x-user"]}}}),
    ("spec.inferencePool.endpointPickerRef.name", "Endpoint Picker", {"inferencePool": {"enabled": True}},
     {"inferencePool": {"enabled": True, "endpointPickerRef": {"name": "chat-epp"}}}),
    ("spec.engine.args", "flags the operator sets", {"engine": {"args": ["--tp", "2"]}},
     {"engine": {"args": ["--chunked-prefill-size", "4096"]}}),
    ("spec.router.args", "flags the operator sets", {"router": {"args": ["--service-discovery"]}},
     {"router": {"args": ["--log-level", "debug"]}}),
    ("spec.engine.env", "env the operator sets", {"engine": {"env": [{"name": "HF_TOKEN", "value": "hf_x"}]}},
     {"engine": {"env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}}),
    ("spec.template.spec.containers", "entry's env must not set env the operator sets",
     {"template": {"spec": {"containers": [{"name": "sglang", "env": [{"name": "POD_IP", "value": "1.2.3.4"}]}]}}},
     {"template": {"spec": {"containers": [{"name": "sglang", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}]}}}),
    # Issue 29, gap 4: every CR string the kubelet expands in the worker's or the router's container.
    ("spec.model.path", "must not contain '$('", {"model": {"path": "$(HF_TOKEN)"}}, {"model": {"path": "org/m$"}}),
    ("spec.model.servedName", "must not contain '$('", {"model": {"path": "m", "servedName": "x$(POD_IP)"}},
     {"model": {"path": "m", "servedName": "$x"}}),
    ("spec.model.revision", "must not contain '$('", {"model": {"path": "m", "revision": "$(HF_TOKEN)"}},
     {"model": {"path": "m", "revision": "main"}}),
    ("spec.model.cache.mountPath", "must not contain '$('", {"model": {"path": "m", "cache": {"mountPath": "/$(X)"}}},
     {"model": {"path": "m", "cache": {"mountPath": "/cache"}}}),
    ("spec.engine.args", "must not contain '$('", {"engine": {"args": ["$(X)", "1"]}},
     {"engine": {"args": ["--chunked-prefill-size", "4096"]}}),
    ("spec.engine.env", "must not contain '$('", {"engine": {"env": [{"name": "A", "value": "$(HF_TOKEN)"}]}},
     {"engine": {"env": [{"name": "A", "value": "$$x ( $"}]}}),
    ("spec.template.spec.containers", "must not contain '$('",
     {"template": {"spec": {"containers": [{"name": "sglang", "env": [{"name": "A", "value": "$(POD_IP)"}]}]}}},
     {"template": {"spec": {"containers": [{"name": "helper", "image": "busybox",
                                            "env": [{"name": "A", "value": "$(B)"}]}]}}}),
    ("spec.router.args", "must not contain '$('", {"router": {"args": ["--log-level=$(SMG_API_KEY)"]}},
     {"router": {"args": ["--log-level", "debug"]}}),
    ("spec.monitoring.interval", "from 5s to 10m", {"monitoring": {"interval": "4s999ms"}},
     {"monitoring": {"interval": "1m30s"}}),
    ("spec.template.metadata", "prefix sglang.ai/",
     {"template": {"metadata": {"annotations": {"sglang.ai/draining-since": "2020-01-01T00:00:00Z"}}}},
     {"template": {"metadata": {"annotations": {"team.example.com/owner": "a"}, "labels": {"team": "a"}}}}),
    ("spec.template.spec.containers", "may only add",
     {"template": {"spec": {"containers": [{"name": "sglang", "command": ["sh", "-c", "id"]}]}}},
     {"template": {"spec": {"containers": [{"name": "sglang", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]},
                                           {"name": "log-shipper", "image": "fluent/fluent-bit:3"}]}}}),
    ("spec.template.spec.containers", "GPU resource",  # the rule on every container's resource names
     {"template": {"spec": {"containers": [{"name": "sglang", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}},
     {"template": {"spec": {"containers": [{"name": "helper", "image": "x",
                                            "resources": {"limits": {"cpu": "1"}}}]}}}),
    ("spec.template.spec.initContainers", "needs an image",
     {"template": {"spec": {"initContainers": [{"name": "prep"}]}}},
     {"template": {"spec": {"initContainers": [{"name": "prep", "image": "busybox"}]}}}),
    ("spec.template.spec.volumes", "exactly one source",
     {"template": {"spec": {"volumes": [{"name": "model-cache", "emptyDir": {}}]}}},
     {"template": {"spec": {"volumes": [{"name": "extra", "configMap": {"name": "c"}}]}}}),
    ("spec.autoscaling.prometheusAuth.headers", "must be one of",
     {"autoscaling": {"prometheusAuth": {"headers": {"X Scope": "a"}}}},
     {"autoscaling": {"prometheusAuth": {"headers": {"X-Scope-OrgID": "a"}}}}),
    ("spec.template.spec.containers", "must be unique",
     {"template": {"spec": {"containers": [{"name": "helper", "image": "a"}, {"name": "helper", "image": "b"}]}}},
     {"template": {"spec": {"volumes": [{"name": "conf", "configMap": {"name": "c"}}],
                            "containers": [{"name": "helper", "image": "a",
                                            "volumeMounts": [{"name": "conf", "mountPath": "/conf"}]}]}}}),
    ("spec.template.spec.volumes", "volume names must be unique",
     {"template": {"spec": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]}}},
     {"template": {"spec": {"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "emptyDir": {}}]}}}),
    ("spec.engine.version", "is required", {"engine": {"image": "registry.local/sglang:latest"}},
     {"engine": {"image": "registry.local/sglang:latest", "version": "0.5.21"}}),
    ("spec.engine.version", "contradicts", {"engine": {"image": "lmsysorg/sglang:v0.5.21-cu129", "version": "0.5.23"}},
     {"engine": {"image": "lmsysorg/sglang:v0.5.21-cu129", "version": "0.5.21"}}),
    ("spec.engine.version", "not a supported", {"engine": {"image": "lmsysorg/sglang:v0.4.6"}},
     {"engine": {"image": "lmsysorg/sglang:v0.5.15.post1-cu126"}}),
    ("spec.parallelism.moeA2ABackend", "not accepted by the SGLang release",
     {"engine": {"image": "lmsysorg/sglang:v0.5.9"}, "parallelism": {"tp": 8, "ep": 8, "moeA2ABackend": "deepep_v2"}},
     {"engine": {"image": "lmsysorg/sglang:v0.5.19"},
      "parallelism": {"tp": 8, "ep": 8, "moeA2ABackend": "deepep_v2"}}),
    ("spec.parallelism.attentionDP", "pplx", {"parallelism": {"tp": 8, "ep": 8, "moeA2ABackend": "pplx"}},
     {"parallelism": {"tp": 8, "ep": 8, "attentionDP": 2, "moeA2ABackend": "pplx"}}),
    ("spec.parallelism.attentionDP", "flashinfer_megamoe",
     {"parallelism": {"tp": 8, "ep": 8, "attentionDP": 2, "moeA2ABackend": "flashinfer"}},
     {"engine": {"image": "lmsysorg/sglang:v0.5.12"},  # the check came with 0.5.13
      "parallelism": {"tp": 8, "ep": 8, "attentionDP": 2, "moeA2ABackend": "flashinfer"}}),
    ("spec.engine.maxRunningRequests", "at least attentionDP",
     {"engine": {"image": "lmsysorg/sglang:v0.5.22", "maxRunningRequests": 4},
      "parallelism": {"tp": 8, "attentionDP": 8}},
     {"engine": {"maxRunningRequests": 4}, "parallelism": {"tp": 8, "attentionDP": 8}}),
    # pods the API server would refuse, and sidecar accelerators (api/pod_rules.py; more in tests/unit/api/)
    ("spec.template.spec.initContainers", "must not be named 'sglang'",
     {"template": {"spec": {"initContainers": [{"name": "sglang", "image": "busybox"}]}}},
     {"template": {"spec": {"initContainers": [{"name": "prep", "image": "busybox"}]}}}),
    ("spec.template.spec.containers", "or model.cache.mountPath",
     {"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "containers": [
         {"name": "sglang", "volumeMounts": [{"name": "v", "mountPath": "/dev/shm"}]}]}}},
     {"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "containers": [
         {"name": "sglang", "volumeMounts": [{"name": "v", "mountPath": "/dev/shm/v"}]}]}}}),
    ("spec.template.spec.containers", "must not use a mountPath twice",
     {"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "containers": [
         {"name": "sglang", "volumeMounts": [{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/a"}]}]}}},
     {"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "containers": [
         {"name": "sglang", "volumeMounts": [{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/b"}]}]}}}),
    ("spec.template.spec.initContainers", "must not use a mountPath twice",
     {"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "initContainers": [
         {"name": "i", "image": "b",
          "volumeMounts": [{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/a"}]}]}}},
     {"template": {"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "initContainers": [
         {"name": "i", "image": "b",
          "volumeMounts": [{"name": "v", "mountPath": "/a"}, {"name": "v", "mountPath": "/b"}]}]}}}),
    ("spec.model.cache.mountPath", "must not be /dev/shm", {"model": {"path": "m", "cache": {"mountPath": "/dev/shm"}}},
     {"model": {"path": "m", "cache": {"mountPath": "/dev/shm2"}}}),
    ("spec.template.metadata.annotations", "must not exceed",
     {"template": {"metadata": {"annotations": {f"a{i}": "x" * 8192 for i in range(32)}}}},
     {"template": {"metadata": {"annotations": {f"a{i}": "x" * 8192 for i in range(31)}}}}),
    ("spec.template.spec.containers", "a container may request only",
     {"template": {"spec": {"containers": [{"name": "h", "image": "b",
                                            "resources": {"limits": {"amd.com/gpu": "1"}}}]}}},
     {"template": {"spec": {"containers": [{"name": "h", "image": "b", "resources": {"limits": {"memory": "1Gi"}}}]}}}),
    ("spec.template.spec.initContainers", "an init container may request only",
     {"template": {"spec": {"initContainers": [{"name": "i", "image": "b",
                                                "resources": {"requests": {"google.com/tpu": "1"}}}]}}},
     {"template": {"spec": {"initContainers": [{"name": "i", "image": "b",
                                                "resources": {"requests": {"cpu": "1"}}}]}}}),
    ("spec.engine.env", "exactly one of valueFrom's",
     {"engine": {"env": [{"name": "A", "value": "x", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}},
     {"engine": {"env": [{"name": "A", "value": "", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}}),
    ("spec.template.spec.containers", "each envFrom entry",
     {"template": {"spec": {"containers": [{"name": "sglang", "envFrom": [{"prefix": "A"}]}]}}},
     {"template": {"spec": {"containers": [{"name": "sglang", "envFrom": [{"secretRef": {"name": "s"}}]}]}}}),
    ("spec.template.spec.initContainers", "each envFrom entry",
     {"template": {"spec": {"initContainers": [{"name": "i", "image": "b", "env": [{"name": "A", "valueFrom": {}}]}]}}},
     {"template": {"spec": {"initContainers": [{"name": "i", "image": "b", "env": [{"name": "A", "value": "a"}]}]}}}),
    ("spec.template.spec.volumes", "each projected source",
     {"template": {"spec": {"volumes": [{"name": "p", "projected": {"sources": [{}]}}]}}},
     {"template": {"spec": {"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "s"}}]}}]}}}),
    ("spec.template.spec.tolerations", "operator Exists must not have a value",
     {"template": {"spec": {"tolerations": [{"key": "k", "operator": "Exists", "value": "v"}]}}},
     {"template": {"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}}}),
    ("spec.template.spec.tolerations", "without a key must have operator Exists",
     {"template": {"spec": {"tolerations": [{"operator": "Equal", "value": "v"}]}}},
     {"template": {"spec": {"tolerations": [{"operator": "Exists"}]}}}),
    ("spec.template.spec.tolerations", "tolerationSeconds must have effect NoExecute",
     {"template": {"spec": {"tolerations": [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 5}]}}},
     {"template": {"spec": {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 5}]}}}),
    ("spec.template.spec.affinity", "needs values for In and NotIn",
     {"template": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
         "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In"}]}]}}}}}},
     {"template": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
         "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "In", "values": ["a"]}]}]}}}}}}),
    ("spec.template.spec.topologySpreadConstraints", "needs values for In and NotIn",
     {"template": {"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z",
      "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchExpressions": [
          {"key": "k", "operator": "Exists", "values": ["a"]}]}}]}}},
     {"template": {"spec": {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z",
      "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchExpressions": [
          {"key": "k", "operator": "Exists"}]}}]}}}),
    ("spec.template.spec.containers", "in each sidecar's resources",
     {"template": {"spec": {"containers": [{"name": "h", "image": "b",
                                            "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}}},
     {"template": {"spec": {"containers": [{"name": "h", "image": "b",
                                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}]}}}),
    ("spec.template.spec.initContainers", "in each init container's resources",
     {"template": {"spec": {"initContainers": [{"name": "i", "image": "b",
      "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "1Gi"}}}]}}},
     {"template": {"spec": {"initContainers": [{"name": "i", "image": "b",
      "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}}]}}}),
    ("spec.template.spec.containers", "with resources.cpu and resources.memory",
     {"resources": {"cpu": "8"}, "template": {"spec": {"containers": [
         {"name": "sglang", "resources": {"requests": {"cpu": "16"}}}]}}},
     {"resources": {"cpu": "8"}, "template": {"spec": {"containers": [
         {"name": "sglang", "resources": {"requests": {"cpu": "4"}}}]}}}),
    ("spec.engine.env", "divisor must be 1m or 1 for cpu",
     {"engine": {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {
         "resource": "limits.cpu", "divisor": "1Mi"}}}]}},
     {"engine": {"env": [{"name": "A", "valueFrom": {"resourceFieldRef": {
         "resource": "limits.cpu", "divisor": "1m"}}}]}}),
    ("spec.template.spec.containers", "divisor must be 1m or 1 for cpu",
     {"template": {"spec": {"containers": [{"name": "sglang", "env": [
         {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1m"}}}]}]}}},
     {"template": {"spec": {"containers": [{"name": "sglang", "env": [
         {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}}]}]}}}),
    ("spec.template.spec.initContainers", "divisor must be 1m or 1 for cpu",
     {"template": {"spec": {"initContainers": [{"name": "i", "image": "b", "env": [
         {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1k"}}}]}]}}},
     {"template": {"spec": {"initContainers": [{"name": "i", "image": "b", "env": [
         {"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "requests.cpu", "divisor": "1"}}}]}]}}}),
    # issue 37: the main container's entry asking for RDMA devices (8 where the operator renders 1, or any without
    # the admin's setting), GPUs of another name or MIG slices outside maxGPUs; cpu, memory, storage, hugepages pass
    ("spec.template.spec.containers", "the 'sglang' entry hugepages-* too",
     {"template": {"spec": {"containers": [{"name": "sglang", "resources": {"limits": {"rdma/ib": "8"}}}]}}},
     {"template": {"spec": {"containers": [{"name": "sglang", "resources": {
         "requests": {"hugepages-2Mi": "1Gi", "ephemeral-storage": "10Gi"},
         "limits": {"hugepages-2Mi": "1Gi", "ephemeral-storage": "20Gi"}}}]}}}),
]  # fmt: skip


CASES += PD_CASES
CASES += PD_AUTOSCALING_CASES


def with_model(patch: dict[str, Any]) -> dict[str, Any]:
    return {"model": {"path": "org/model"}, **patch}


def matching_rule(field: str, fragment: str) -> Rule:
    matches = [rule for rule in RULES if rule.field == field and fragment in rule.message]
    assert len(matches) == 1, f"{field!r}/{fragment!r} matches {len(matches)} rules"
    return matches[0]


@pytest.mark.parametrize(("field", "fragment", "failing", "passing"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_rule(field: str, fragment: str, failing: dict[str, Any], passing: dict[str, Any]) -> None:
    rule = matching_rule(field, fragment)
    spec, errors = parse_spec(with_model(failing))
    assert spec is None
    assert [(e.field, e.message) for e in errors] == [(rule.field, rule.message)]
    spec, errors = parse_spec(with_model(passing))
    assert errors == []
    assert spec is not None


def test_every_rule_has_a_case() -> None:
    """The table covers the top level's rules; tests/unit/api/test_worker_groups.py derives the per-group ones from
    it and covers the fleet's group rules."""
    covered = {matching_rule(field, fragment) for field, fragment, _, _ in CASES}
    assert covered == {rule for rule in RULES if not isinstance(rule, GroupRule)} - set(FLEET_RULES)


def test_smallest_spec_is_valid_with_defaults() -> None:
    spec, errors = parse_spec({"model": {"path": "org/model"}})
    assert errors == [] and spec is not None
    assert (spec.replicas, spec.parallelism.tp, spec.router.enabled) == (1, 1, True)


def test_missing_model_path_names_the_field() -> None:
    _, errors = parse_spec({"model": {}})
    assert [(e.field, e.message) for e in errors] == [("spec.model.path", "is required.")]


def test_enum_error_names_the_field() -> None:
    _, errors = parse_spec(with_model({"router": {"policy": "shortest_queue"}}))
    assert [e.field for e in errors] == ["spec.router.policy"]
    assert "cache_aware" in errors[0].message


def test_unknown_fields_are_ignored() -> None:
    spec, errors = parse_spec(with_model({"futureField": {"x": 1}, "engine": {"newKnob": True}}))
    assert errors == [] and spec is not None


def test_rules_and_parse_agree_on_examples() -> None:
    import yaml

    from tests.conftest import EXAMPLES

    for path in EXAMPLES:
        spec, errors = parse_spec(yaml.safe_load(path.read_text())["spec"])
        assert errors == [], path.name
        assert spec is not None and check_rules(spec) == []
