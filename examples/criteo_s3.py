"""Criteo with tf.data reading TFRecord objects from S3 (or any S3-compatible store) with boto3.

    list objects -> GET (parallel map, knob "read") -> records -> batch -> parse -> transform -> prefetch

Each object is a small TFRecord file of whole records (:func:`upload_dataset` writes them
from generated shards). The endpoint comes from ``endpoint_url``, else
``INTUNE_FLOW_S3_ENDPOINT_URL``, else boto3's own configuration (``AWS_ENDPOINT_URL``,
profiles, AWS itself). ``latency_ms`` adds a delay to every GET, modelling a store
farther away than the one you test against. GETs block a tf.data thread each, so the
``read`` parallelism and the ``threadpool`` size decide throughput until the CPU binds.
Elements are those of :mod:`examples.criteo`.

With no ``bucket``, the bucket ``intune-flow-demo`` is used and, when it holds no
objects under ``prefix``, created and filled from the default generated dataset.
"""

from __future__ import annotations

import os
import time

import numpy as np
import tensorflow as tf

from .criteo import parse, record_ranges, split_records, transform
from intune_flow.data import default_dataset

DEFAULT_BUCKET = "intune-flow-demo"
DEFAULT_PREFIX = "criteo/"


def s3_client(endpoint_url=None):
    """A boto3 S3 client for ``endpoint_url`` (or INTUNE_FLOW_S3_ENDPOINT_URL / boto3 defaults)."""
    import boto3
    from botocore.config import Config

    endpoint_url = endpoint_url or os.environ.get("INTUNE_FLOW_S3_ENDPOINT_URL") or None
    s3 = {"addressing_style": "path"} if endpoint_url else {}
    return boto3.client("s3", endpoint_url=endpoint_url,
                        config=Config(max_pool_connections=128, retries={"max_attempts": 3}, s3=s3))


def upload_dataset(bucket, prefix=DEFAULT_PREFIX, files=None, *, client=None, endpoint_url=None,
                   records_per_object=256, create_bucket=True) -> list[str]:
    """Split TFRecord shards into objects of ``records_per_object`` records; PUT them; return keys."""
    files = list(files) if files is not None else default_dataset("tfrecord")
    client = client or s3_client(endpoint_url)
    if create_bucket:
        try:
            client.head_bucket(Bucket=bucket)
        except client.exceptions.ClientError:
            client.create_bucket(Bucket=bucket)
    keys = []
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            blob = f.read()
        for j, (offset, length) in enumerate(record_ranges(path, records_per_object)):
            key = f"{prefix}part-{i:05d}-{j:05d}.tfrecord"
            client.put_object(Bucket=bucket, Key=key, Body=blob[offset:offset + length])
            keys.append(key)
    return keys


def list_keys(client, bucket, prefix) -> list[str]:
    keys = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(obj["Key"] for obj in page.get("Contents", ()))
    return sorted(keys)


def criteo_s3_pipeline(knobs, bucket=None, prefix=DEFAULT_PREFIX, endpoint_url=None,
                       batch_size=1024, epochs=None, latency_ms=0.0):
    """tf.data over the TFRecord objects under ``s3://bucket/prefix``."""
    endpoint_url = endpoint_url or os.environ.get("INTUNE_FLOW_S3_ENDPOINT_URL") or None
    client = s3_client(endpoint_url)
    keys = list_keys(client, bucket or DEFAULT_BUCKET, prefix) if bucket else []
    if bucket is None:
        bucket = DEFAULT_BUCKET
        try:
            keys = list_keys(client, bucket, prefix)
        except client.exceptions.NoSuchBucket:
            keys = []
        keys = keys or upload_dataset(bucket, prefix, client=client)
    if not keys:
        raise ValueError(f"no objects under s3://{bucket}/{prefix}; upload some with "
                         "examples.criteo_s3.upload_dataset(bucket, prefix)")
    delay = float(latency_ms) / 1000.0

    def get(key):
        if delay:
            time.sleep(delay)
        body = client.get_object(Bucket=bucket, Key=key.decode())["Body"]  # clients are thread-safe
        return np.array(split_records(body.read()), dtype=object)

    def fetch(key):
        return tf.reshape(tf.numpy_function(get, [key], tf.string, stateful=True), [-1])

    ds = tf.data.Dataset.from_tensor_slices(keys).repeat(epochs)
    ds = ds.map(fetch, num_parallel_calls=knobs.parallelism("read", max=64), deterministic=False)
    ds = ds.unbatch().batch(batch_size)
    ds = ds.map(parse, num_parallel_calls=knobs.parallelism("parse", max=16))
    ds = ds.map(transform, num_parallel_calls=knobs.parallelism("transform", max=16))
    return ds.prefetch(knobs.buffer("prefetch", max=64))
