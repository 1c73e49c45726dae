"""Typed settings for the data plane: where Kafka is, how Spark starts, where files go.

Every option has a default and a one-line description. Nothing here reads the environment when
imported; `EspSettings.load` reads an optional YAML/JSON file when it is called.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator


class SettingsError(ValueError):
    """A configuration file or value that esp cannot use; the message names the problem."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


SecurityProtocol = Literal["PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

# Java's JAAS login modules of the Kafka client, one per SASL mechanism.
_LOGIN_MODULES: dict[str, str] = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Quoted JAAS values end at '"'; a backslash escapes. Refusing both (and control characters)
# keeps a credential from ending its quoted value early and injecting JAAS or properties text.
_UNQUOTABLE = re.compile(r'["\\\x00-\x1f\x7f]')


def _check_quotable(what: str, value: str) -> None:
    if _UNQUOTABLE.search(value):
        raise ValueError(f"{what} must not contain a double quote, a backslash or control characters")


class _Secretive(_Strict):
    # A rejected value may be a password: validation errors must not echo their input.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class KafkaClientSecurity(_Secretive):
    """How esp's Kafka clients authenticate and encrypt: PLAINTEXT (the default), SASL and/or TLS.

    `client_kwargs` renders it for kafka-python, `spark_options` for Spark's Kafka source and
    sink. The password is a SecretStr: repr, str and logs show `**********`.
    """

    protocol: SecurityProtocol = Field("PLAINTEXT", description="Kafka security.protocol of every esp client.")
    sasl_mechanism: SaslMechanism | None = Field(None, description="SASL mechanism (SASL_* protocols only).")
    sasl_username: str | None = Field(None, min_length=1, description="SASL user name (SASL_* protocols only).")
    sasl_password: SecretStr | None = Field(None, description="SASL password; never printed or logged.")
    ssl_cafile: Path | None = Field(None, description="PEM file of the CA(s) that signed the broker's certificate.")
    ssl_certfile: Path | None = Field(
        None, description="PEM file with the client certificate chain and its PKCS#8 private key (mutual TLS)."
    )

    @field_validator("sasl_username")
    @classmethod
    def _username_quotable(cls, value: str | None) -> str | None:
        if value is not None:
            _check_quotable("kafka.security.sasl_username", value)
        return value

    @field_validator("sasl_password")
    @classmethod
    def _password_quotable(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _check_quotable("kafka.security.sasl_password", value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KafkaClientSecurity:
        sasl_fields = {"sasl_mechanism": self.sasl_mechanism, "sasl_username": self.sasl_username}
        sasl_fields["sasl_password"] = self.sasl_password
        if self.uses_sasl:
            missing = [name for name, value in sasl_fields.items() if value is None]
            if missing:
                raise ValueError(f"kafka.security.protocol {self.protocol} needs {', '.join(missing)}")
        elif given := [name for name, value in sasl_fields.items() if value is not None]:
            raise ValueError(f"{', '.join(given)} set but kafka.security.protocol {self.protocol} does not use SASL")
        if not self.uses_ssl and (self.ssl_cafile or self.ssl_certfile):
            raise ValueError(f"ssl_cafile/ssl_certfile set but kafka.security.protocol {self.protocol} is not TLS")
        return self

    @property
    def uses_sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def uses_ssl(self) -> bool:
        return self.protocol.endswith("SSL")

    def client_kwargs(self) -> dict[str, object]:
        """Keyword arguments for kafka-python's KafkaProducer/KafkaConsumer/KafkaAdminClient."""
        kwargs: dict[str, object] = {"security_protocol": self.protocol}
        if self.uses_sasl:
            assert self.sasl_password is not None  # checked by _consistent
            kwargs |= {
                "sasl_mechanism": self.sasl_mechanism,
                "sasl_plain_username": self.sasl_username,
                "sasl_plain_password": self.sasl_password.get_secret_value(),
            }
        if self.ssl_cafile:
            kwargs["ssl_cafile"] = str(self.ssl_cafile)
        if self.ssl_certfile:
            kwargs["ssl_certfile"] = str(self.ssl_certfile)
        return kwargs

    def spark_options(self) -> dict[str, str]:
        """`kafka.*` options for Spark's Kafka source and sink (Kafka clients 4.x, PEM files)."""
        options = {"kafka.security.protocol": self.protocol}
        if self.uses_sasl:
            assert self.sasl_mechanism is not None and self.sasl_password is not None  # checked by _consistent
            options["kafka.sasl.mechanism"] = self.sasl_mechanism
            options["kafka.sasl.jaas.config"] = (
                f'{_LOGIN_MODULES[self.sasl_mechanism]} required username="{self.sasl_username}" '
                f'password="{self.sasl_password.get_secret_value()}";'
            )
        if self.ssl_cafile:
            options |= {"kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": str(self.ssl_cafile)}
        if self.ssl_certfile:
            options |= {"kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.location": str(self.ssl_certfile)}
        return options


@dataclass(frozen=True)
class KafkaConnection:
    """Where a Kafka client dials and how it authenticates: the one value passed to every client.

    `str()` is the bootstrap address alone, so messages that name the broker never show secrets.
    """

    bootstrap_servers: str
    security: KafkaClientSecurity = KafkaClientSecurity()

    def __str__(self) -> str:
        return self.bootstrap_servers

    def client_kwargs(self) -> dict[str, object]:
        """bootstrap_servers plus the security kwargs, for a kafka-python client constructor."""
        return {"bootstrap_servers": self.bootstrap_servers, **self.security.client_kwargs()}

    def spark_options(self) -> dict[str, str]:
        """kafka.bootstrap.servers plus the security options, for Spark's Kafka source and sink."""
        return {"kafka.bootstrap.servers": self.bootstrap_servers, **self.security.spark_options()}


def kafka_connection(kafka: KafkaConnection | str) -> KafkaConnection:
    """A connection from either a connection or a bare bootstrap address (which means PLAINTEXT)."""
    return kafka if isinstance(kafka, KafkaConnection) else KafkaConnection(kafka)


class KafkaSaslListener(_Secretive):
    """Makes the broker's client port a SASL_PLAINTEXT listener (mechanism PLAIN) with these users.

    Inter-broker traffic then moves to a PLAINTEXT listener on `internal_port`, bound to the same
    host as the others (127.0.0.1 by default).
    """

    internal_port: int = Field(9094, ge=1, le=65535, description="Port of the inter-broker PLAINTEXT listener.")
    users: dict[str, SecretStr] = Field(
        ..., min_length=1, description="PLAIN users the broker accepts on its client port: name -> password."
    )

    @field_validator("users")
    @classmethod
    def _names_and_passwords_quotable(cls, users: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name, password in users.items():
            if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
                raise ValueError(f"kafka.sasl_listener user name {name!r} may only hold letters, digits, . _ -")
            _check_quotable(f"password of kafka.sasl_listener user {name!r}", password.get_secret_value())
            if not password.get_secret_value().isascii():  # Java reads server.properties as ISO-8859-1
                raise ValueError(f"password of kafka.sasl_listener user {name!r} must be ASCII")
        return users


class KafkaSettings(_Secretive):
    """The local KRaft broker esp starts, and how clients reach it."""

    host: str = Field("127.0.0.1", description="Address the broker binds to and clients dial.")
    client_port: int = Field(9092, ge=1, le=65535, description="Port of the PLAINTEXT client listener.")
    controller_port: int = Field(9093, ge=1, le=65535, description="Port of the KRaft controller listener.")
    heap: str = Field("512m", description="JVM heap for the broker (-Xmx and -Xms).")
    start_timeout_s: float = Field(60.0, gt=0, description="How long `infra up` waits for the broker to answer.")
    default_partitions: int = Field(4, ge=1, description="Partitions of topics created without an explicit count.")
    security: KafkaClientSecurity = Field(
        default_factory=KafkaClientSecurity, description="How esp's clients authenticate and encrypt (README)."
    )
    sasl_listener: KafkaSaslListener | None = Field(
        None, description="Make the local broker's client port require SASL PLAIN (off: PLAINTEXT)."
    )
    nodes: Literal[1, 3] = Field(
        1, description="Kafka processes esp starts: 1 broker, or a KRaft cluster of 3 (replication 3, min ISR 2)."
    )
    node_port_step: int = Field(
        10, ge=1, description="In a cluster, node n listens on each port above plus (n - 1) times this step."
    )

    @model_validator(mode="after")
    def _clients_speak_the_listener(self) -> KafkaSettings:
        if self.sasl_listener and (self.security.protocol, self.security.sasl_mechanism) != ("SASL_PLAINTEXT", "PLAIN"):
            raise ValueError(
                "kafka.sasl_listener makes the client port SASL_PLAINTEXT with PLAIN: set kafka.security.protocol "
                "SASL_PLAINTEXT and sasl_mechanism PLAIN with one of its users"
            )
        return self

    @model_validator(mode="after")
    def _node_ports_distinct(self) -> KafkaSettings:
        ports = [port for node_id in self.node_ids for port in self.cluster_node(node_id).ports]
        if self.nodes > 1 and (len(set(ports)) < len(ports) or max(ports) > 65535):
            raise ValueError(
                f"the {self.nodes} Kafka nodes' ports {ports} overlap or exceed 65535: choose another "
                "kafka.node_port_step or other ports"
            )
        return self

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address: clients still reach a cluster with one node down."""
        return ",".join(f"{self.host}:{self.cluster_node(node_id).client_port}" for node_id in self.node_ids)

    @property
    def node_ids(self) -> range:
        """The KRaft node ids (node.id), 1 to `nodes`."""
        return range(1, self.nodes + 1)

    @property
    def ports(self) -> list[int]:
        """Every port one broker binds: client, controller and (with SASL) inter-broker."""
        internal = [self.sasl_listener.internal_port] if self.sasl_listener else []
        return [self.client_port, self.controller_port, *internal]

    def cluster_node(self, node_id: int) -> KafkaSettings:
        """Node `node_id`'s own settings, as a lone broker's: every port shifted by (node_id - 1) steps."""
        if node_id == 1:
            return self.model_copy(update={"nodes": 1})
        shift = (node_id - 1) * self.node_port_step
        sasl = self.sasl_listener
        if sasl is not None:
            sasl = sasl.model_copy(update={"internal_port": sasl.internal_port + shift})
        update = {"client_port": self.client_port + shift, "controller_port": self.controller_port + shift}
        return self.model_copy(update={**update, "sasl_listener": sasl, "nodes": 1})

    @property
    def replication_factor(self) -> int:
        """Replicas of every topic esp's broker(s) create, internal ones included: min(3, nodes)."""
        return min(3, self.nodes)

    @property
    def min_insync_replicas(self) -> int:
        """Replicas an acks=all write waits for: 2 on the cluster (one node may be down), else 1."""
        return min(2, self.replication_factor)

    @property
    def connection(self) -> KafkaConnection:
        """The bootstrap address and client security, as one value for every Kafka client."""
        return KafkaConnection(self.bootstrap_servers, self.security)


class ExecutorScalingSettings(_Strict):
    """Executors that follow channels on a cluster: after each committed rescale (and at a stream's
    start) the stream asks its cluster manager for `ceil(channels / channels_per_executor)`
    executors within the bounds, and gives surplus executors back at the batch boundary."""

    follow_channels: bool = Field(
        False, description="A rescale also requests or releases executors (on a cluster master; ignored on local[*])."
    )
    channels_per_executor: int = Field(2, ge=1, description="Channels one executor serves.")
    min_executors: int = Field(1, ge=1, description="Fewest executors the stream keeps.")
    max_executors: int = Field(8, ge=1, description="Most executors the stream asks for.")

    @model_validator(mode="after")
    def _bounds_ordered(self) -> ExecutorScalingSettings:
        if self.min_executors > self.max_executors:
            raise ValueError(
                f"spark.executors.min_executors ({self.min_executors}) exceeds max_executors ({self.max_executors})"
            )
        return self

    def executors_for(self, channels: int) -> int:
        """Executors `channels` channels get: one per `channels_per_executor`, within the bounds."""
        wanted = -(-channels // self.channels_per_executor)  # the ceiling, in integers
        return max(self.min_executors, min(self.max_executors, wanted))


class SparkSettings(_Strict):
    """How the one Spark session of a process is built."""

    master: str = Field(
        "local[*]", description="spark.master: local[*], or a cluster URL (default: esp's, with spark_cluster.enabled)."
    )
    app_name: str = Field("esp", description="Spark application name shown in the Spark UI.")
    ui_enabled: bool = Field(True, description="Start the Spark web UI, read-only (its kill links are off).")
    ui_host: str = Field("127.0.0.1", description="Address the Spark web UI binds to (the driver's SPARK_LOCAL_IP).")
    shuffle_partitions: int = Field(8, ge=1, description="spark.sql.shuffle.partitions for batch and streaming plans.")
    driver_memory: str = Field("2g", description="spark.driver.memory (only takes effect before the JVM starts).")
    driver_host: str = Field("127.0.0.1", description="Address the Spark driver binds to and advertises.")
    python_executable: str | None = Field(
        None, description="Python of the Spark workers; default: the driver's own interpreter."
    )
    preload_worker_imports: bool = Field(
        True,
        description="Python workers fork from a daemon that imported pandas, pyarrow and the elastic stage once "
        "and froze them out of the garbage collector's walk (pipelines.worker_daemon): a fresh worker starts in ms, "
        "not ~1-2 s, and the collection after each task takes ~1 ms, not ~0.1 s.",
    )
    nio_local_fs: bool = Field(
        True,
        description="Hadoop's local file system sets permissions and reads link status through java.nio (esp's "
        "classes, infra/jvm/local-fs), not a chmod or readlink process per created file: ~30 processes a micro-batch.",
    )
    dataframe_call_sites: bool = Field(
        False,
        description="Record each DataFrame call's Python call site for Spark's error messages "
        "(spark.python.sql.dataFrameDebugging.enabled); each costs JVM round trips and a stack walk.",
    )
    executors: ExecutorScalingSettings = Field(
        default_factory=ExecutorScalingSettings, description="Executors that follow the stream's channels on a cluster."
    )
    conf: dict[str, str] = Field(default_factory=dict, description="Any further Spark conf, applied last.")


_JVM_MEMORY = r"^[1-9][0-9]*[kKmMgGtT]$"
"""A JVM memory size as Spark's daemons take it: 512m, 1g."""


class SparkClusterSettings(_Strict):
    """The Spark standalone cluster esp starts on this machine (`orchestration/stack/spark_cluster.py`):
    one master and `workers` workers, each worker offering `cores_per_worker` cores and
    `memory_per_worker` to one executor of a stream."""

    enabled: bool = Field(False, description="`esp infra up` starts the cluster, and spark.master defaults to its URL.")
    host: str = Field("127.0.0.1", description="Address the master, workers and their web UIs bind to.")
    workers: int = Field(2, ge=1, le=32, description="Worker processes the cluster runs.")
    cores_per_worker: int = Field(1, ge=1, description="Cores each worker offers (an executor takes them all).")
    memory_per_worker: str = Field(
        "1g", pattern=_JVM_MEMORY, description="Memory each worker offers: the heap of its executor."
    )
    master_port: int = Field(7077, ge=1, le=65535, description="Port of the master; worker n listens on it plus n.")
    webui_port: int = Field(
        8080, ge=1, le=65535, description="Port of the master's web UI and JSON state; worker n's UI is it plus n."
    )
    daemon_heap: str = Field("512m", pattern=_JVM_MEMORY, description="JVM heap of the master and of each worker.")
    start_timeout_s: float = Field(120.0, gt=0, description="How long `infra up` waits for every worker to register.")

    @model_validator(mode="after")
    def _ports_distinct(self) -> SparkClusterSettings:
        if len(set(self.ports)) < len(self.ports) or max(self.ports) > 65535:
            raise ValueError(
                f"the Spark cluster's ports {self.ports} overlap or exceed 65535: choose another "
                "spark_cluster.master_port or webui_port"
            )
        return self

    @property
    def master_url(self) -> str:
        """The master's URL: what spark.master is when the streams run on the cluster."""
        return f"spark://{self.host}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        """The master's web UI; its JSON state is at `/json/`."""
        return f"http://{self.host}:{self.webui_port}"

    @property
    def worker_ids(self) -> range:
        return range(1, self.workers + 1)

    @property
    def ports(self) -> list[int]:
        """Every port the cluster binds: the master's two, then each worker's RPC and web UI port."""
        workers = [port for n in self.worker_ids for port in (self.master_port + n, self.webui_port + n)]
        return [self.master_port, self.webui_port, *workers]

    def executor_conf(self) -> dict[str, str]:
        """A session's executor sizing on this cluster: one executor fills one worker."""
        return {"spark.executor.cores": str(self.cores_per_worker), "spark.executor.memory": self.memory_per_worker}


class PostgresSettings(_Strict):
    """The PostgreSQL cluster esp starts under the run folder for Dagster's storage (`dagster_storage: postgres`)."""

    port: int = Field(5433, ge=1, le=65535, description="Port the server listens on, on 127.0.0.1 only.")
    bin_dir: Path | None = Field(
        None, description="Folder of initdb and pg_ctl; default: the newest /usr/lib/postgresql/*/bin, else PATH."
    )
    run_as: str = Field(
        "postgres", min_length=1, description="OS user the server runs as when esp runs as root (initdb refuses root)."
    )
    start_timeout_s: float = Field(60.0, gt=0, description="How long `infra up` waits for the server to accept.")


DEFAULT_CREDENTIALS_PROVIDER = "software.amazon.awssdk.auth.credentials.DefaultCredentialsProvider"
"""The AWS SDK's default chain: $AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY, ~/.aws, web identity,
container and instance roles; pyarrow's S3 client reads the same chain."""


@dataclass(frozen=True)
class ObjectStoreAccess:
    """Where and how the object store is reached, resolved once from the settings and the AWS
    environment: what Spark's s3a connector is told, and what the state layer (pyarrow) reads."""

    endpoint_url: str | None
    region: str | None
    path_style_access: bool
    credentials_provider: str
    local_keys: tuple[str, str] | None = None
    """The keys of esp's local server (`object_store.server`), when it is the endpoint."""

    def environment(self) -> dict[str, str]:
        """The standard AWS variables that carry this endpoint and region to pyarrow, in this
        process and in the Python workers it starts. A user's credentials are never copied: only
        the local server's keys, which guard nothing beyond this machine's loopback."""
        env: dict[str, str] = {}
        if self.endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self.region:
            env |= {"AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region}
        if self.local_keys is not None:
            env |= {"AWS_ACCESS_KEY_ID": self.local_keys[0], "AWS_SECRET_ACCESS_KEY": self.local_keys[1]}
        return env

    def hadoop_conf(self) -> dict[str, str]:
        """`fs.s3a.*` settings of Hadoop's s3a connector (Spark takes them as `spark.hadoop.*`)."""
        conf = {
            "fs.s3a.path.style.access": str(self.path_style_access).lower(),
            "fs.s3a.aws.credentials.provider": self.credentials_provider,
        }
        if self.endpoint_url:
            conf["fs.s3a.endpoint"] = self.endpoint_url
            conf["fs.s3a.connection.ssl.enabled"] = str(self.endpoint_url.startswith("https://")).lower()
        if self.region:
            conf["fs.s3a.endpoint.region"] = self.region
        return conf


class ObjectStoreServerSettings(_Secretive):
    """The S3-compatible server esp starts on this machine for the cluster profile: moto's server,
    from PyPI (`orchestration/stack/object_store.py`). It keeps objects in memory while it runs:
    `esp infra down` empties the store; point `object_store.endpoint_url` at a durable store
    (MinIO, Ceph, AWS) for data that must outlive it."""

    enabled: bool = Field(
        False, description="`esp infra up` starts the server, and the object store's endpoint defaults to it."
    )
    host: str = Field("127.0.0.1", description="Address the server binds to.")
    port: int = Field(9300, ge=1, le=65535, description="Port the server listens on.")
    bucket: str = Field(
        "esp", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", description="Bucket created at start for the streams."
    )
    access_key_id: str = Field("esp-local", min_length=1, description="Access key the clients sign with.")
    secret_access_key: SecretStr = Field(
        SecretStr("esp-local"), description="Secret key the clients sign with (the local server accepts any)."
    )

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class ObjectStoreSettings(_Strict):
    """How esp reaches the S3-compatible object store of a stream folder on `s3://` or `s3a://`:
    Spark through Hadoop's s3a connector, the state layer through pyarrow. An option left unset is
    the standard AWS setting of the environment, read when a session is built (`access`)."""

    endpoint_url: str | None = Field(
        None,
        pattern=r"^https?://[^/?#]+/?$",
        description="The store's URL, e.g. http://127.0.0.1:9000; unset: $AWS_ENDPOINT_URL_S3 or "
        "$AWS_ENDPOINT_URL, else AWS's own.",
    )
    region: str | None = Field(
        None,
        min_length=1,
        description="Region requests are signed for; unset: $AWS_REGION or $AWS_DEFAULT_REGION, else us-east-1 "
        "with an endpoint (AWS's own finds the bucket's).",
    )
    path_style_access: bool = Field(
        True, description="Address a bucket as <endpoint>/<bucket>, as S3-compatible servers need (AWS accepts it)."
    )
    credentials_provider: str = Field(
        DEFAULT_CREDENTIALS_PROVIDER,
        min_length=1,
        description="s3a's credentials provider class(es); default: the AWS SDK's chain ($AWS_ACCESS_KEY_ID..., "
        "~/.aws, roles), the one pyarrow reads too.",
    )
    server: ObjectStoreServerSettings = Field(
        default_factory=ObjectStoreServerSettings, description="The local S3-compatible server of the cluster profile."
    )

    def access(self, environ: Mapping[str, str]) -> ObjectStoreAccess:
        """The settings, each unset one taken from the AWS variables of `environ`; with the local
        server enabled, its endpoint and keys (an explicit endpoint still wins)."""
        local = self.server if self.server.enabled else None
        endpoint = (
            self.endpoint_url
            or (local.endpoint_url if local else None)
            or environ.get("AWS_ENDPOINT_URL_S3")
            or environ.get("AWS_ENDPOINT_URL")
            or None
        )
        region = self.region or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
        if region is None and endpoint:
            region = "us-east-1"  # an S3-compatible server ignores it, but requests must be signed for one
        local_keys = None
        if local is not None and endpoint == local.endpoint_url:
            local_keys = (local.access_key_id, local.secret_access_key.get_secret_value())
        return ObjectStoreAccess(
            endpoint_url=endpoint.rstrip("/") if endpoint else None,
            region=region,
            path_style_access=self.path_style_access,
            credentials_provider=self.credentials_provider,
            local_keys=local_keys,
        )

    def export(self, environ: MutableMapping[str, str]) -> ObjectStoreAccess:
        """`access`, written back to `environ` as the standard AWS variables, so that this process's
        pyarrow (the state layer) and the processes it starts reach the store that Spark reaches."""
        access = self.access(environ)
        environ.update(access.environment())
        return access


Profile = Literal["local", "cluster"]

CLUSTER_PROFILE: dict[str, object] = {
    "kafka": {"nodes": 3},
    "dagster_storage": "postgres",
    "spark_cluster": {"enabled": True},
    "object_store": {"server": {"enabled": True}},
    "spark": {"executors": {"follow_channels": True, "channels_per_executor": 2, "max_executors": 2}},
}
"""What `profile: cluster` changes, under whatever the settings file says (the file wins, key by key):
3 Kafka nodes, Dagster on PostgreSQL, the Spark standalone cluster with executors following
channels, the streams' folders on the local object store."""


def _under(defaults: Mapping[str, object], given: Mapping[str, object]) -> dict[str, object]:
    """`given` laid over `defaults`, nested mappings merged key by key."""
    merged = dict(defaults)
    for key, value in given.items():
        below = merged.get(key)
        if isinstance(below, Mapping) and isinstance(value, Mapping):
            merged[key] = _under(below, value)
        else:
            merged[key] = value
    return merged


class EspSettings(_Secretive):
    """All esp settings; `project_root` anchors the ignored run and cache folders."""

    profile: Profile = Field(
        "local",
        description="local: one broker, local[*], SQLite, local folders; cluster: CLUSTER_PROFILE's pieces "
        "(3 Kafka nodes, Spark standalone, PostgreSQL, object store) under the file's own settings.",
    )
    streams_root: str | None = Field(
        None,
        description="Folder or URI (file://, s3a://) of the streams' folders; default: s3a://<bucket>/streams on "
        "the local object store when it is enabled, else <run_dir>/streams.",
    )

    project_root: Path = Field(
        default_factory=Path.cwd, description="Repository root; run and cache folders live under it."
    )
    run_dir_name: str = Field(
        ".esp/run", description="Folder (under project_root) for broker data, logs, pid files, DAGSTER_HOME."
    )
    jars_dir_name: str = Field(".esp/jars", description="Folder (under project_root) holding the Maven-resolved jars.")
    kafka: KafkaSettings = Field(default_factory=KafkaSettings, description="The Kafka broker.")
    spark: SparkSettings = Field(default_factory=SparkSettings, description="The Spark session.")
    dagster_storage: Literal["sqlite", "postgres"] = Field(
        "sqlite", description="Dagster's run and event storage: SQLite in DAGSTER_HOME, or esp's own PostgreSQL."
    )
    postgres: PostgresSettings = Field(
        default_factory=PostgresSettings, description="esp's PostgreSQL (used when dagster_storage is postgres)."
    )
    spark_cluster: SparkClusterSettings = Field(
        default_factory=SparkClusterSettings, description="esp's Spark standalone cluster (with spark_cluster.enabled)."
    )
    object_store: ObjectStoreSettings = Field(
        default_factory=ObjectStoreSettings, description="The S3-compatible store of stream folders on s3:// or s3a://."
    )

    @model_validator(mode="before")
    @classmethod
    def _profile_then_cluster_master(cls, data: object) -> object:
        """The profile's pieces under the given settings, then the cluster's master as spark.master."""
        if isinstance(data, dict) and data.get("profile") == "cluster":
            data = _under(CLUSTER_PROFILE, data)
        return cls._streams_run_on_the_cluster(data)

    @staticmethod
    def _streams_run_on_the_cluster(data: object) -> object:
        """With `spark_cluster.enabled`, `spark.master` defaults to the cluster's URL (one given wins)."""
        if not isinstance(data, dict) or data.get("spark_cluster") is None:
            return data
        try:
            cluster = SparkClusterSettings.model_validate(data["spark_cluster"])
        except ValidationError:
            return data  # reported by the field's own validation
        spark = data.get("spark")
        if not cluster.enabled:
            return data
        if isinstance(spark, SparkSettings):
            if "master" not in spark.model_fields_set:
                spark = spark.model_copy(update={"master": cluster.master_url})
        elif spark is None or (isinstance(spark, dict) and "master" not in spark):
            spark = {**(spark or {}), "master": cluster.master_url}
        return {**data, "spark": spark}

    @property
    def run_dir(self) -> Path:
        return self.project_root / self.run_dir_name

    @property
    def jars_dir(self) -> Path:
        return self.project_root / self.jars_dir_name

    @property
    def streams_folder(self) -> str:
        """Where the streams' folders live: `streams_root`, else the local object store's bucket, else run_dir."""
        if self.streams_root is not None:
            return self.streams_root
        if self.object_store.server.enabled:
            return f"s3a://{self.object_store.server.bucket}/streams"
        return str(self.run_dir / "streams")

    def to_file_data(self) -> dict:
        """The settings as a mapping `load` reads back, passwords included (`model_dump_json`
        masks them): for the settings file of a child process, which must be kept private."""
        return json.loads(json.dumps(self.model_dump(), default=_reveal))

    @classmethod
    def load(cls, path: Path | None = None, **overrides: object) -> EspSettings:
        """Settings from an optional YAML or JSON file, then keyword overrides."""
        data: dict = {}
        if path is not None:
            data = _read_settings_file(path)
        data.update(overrides)
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            where = f" in {path}" if path else ""
            raise SettingsError(f"invalid esp settings{where}: {err}") from err


def _reveal(value: object) -> str:
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value)


def _read_settings_file(path: Path) -> dict:
    if not path.is_file():
        raise SettingsError(f"settings file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix in {".yaml", ".yml"}:
            import yaml

            loaded = yaml.safe_load(text) or {}
        else:
            loaded = json.loads(text)
    except Exception as err:  # both parsers raise their own error types
        raise SettingsError(f"settings file {path} is not valid {path.suffix.lstrip('.')}: {err}") from err
    if not isinstance(loaded, dict):
        raise SettingsError(f"settings file {path} must hold a mapping at the top level")
    return loaded
