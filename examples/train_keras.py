"""A small real Keras (TensorFlow) training run to try the profiler on: a dense net learning a
synthetic regression, with validation and a final predict.

Runs in a few seconds on a CPU; the data is made here (no download). Profile it with no code change:

    otel-profiler run -- python examples/train_keras.py

``--tf-profile LOGDIR`` also captures the whole run with TensorFlow's own profiler
(``tf.profiler.experimental``), which ``otel-profiler summary LOGDIR`` then reads.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow loads: keep its logs quiet


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--tf-profile", metavar="LOGDIR", help="also capture with tf.profiler")
    args = parser.parse_args()

    import keras
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.random((args.samples, 16), dtype=np.float32)
    y = x @ rng.random((16, 1), dtype=np.float32)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    if args.tf_profile:
        import tensorflow as tf

        tf.profiler.experimental.start(args.tf_profile)
    model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, verbose=0, validation_split=0.25)
    model.predict(x[:64], verbose=0)
    if args.tf_profile:
        tf.profiler.experimental.stop()


if __name__ == "__main__":
    main()
