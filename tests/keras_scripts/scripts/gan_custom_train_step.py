# Exercises keras.io guide "Customizing what happens in fit() with PyTorch" (wrapping up: an end-to-end GAN example).
import json

import numpy as np

import tapeflow as keras
from tapeflow import layers, ops


def loss_and_gradients(compute_loss, variables):
    """compute_loss() and its gradients with respect to `variables`, by the backend's autodiff."""
    if keras.__name__ == "tapeflow":
        with keras.GradientTape() as tape:
            loss = compute_loss()
        return loss, tape.gradient(loss, variables)
    import torch  # the Keras reference runs on its torch backend, imported lazily

    loss = compute_loss()
    return loss, list(torch.autograd.grad(loss, [v.value for v in variables]))


discriminator = keras.Sequential(
    [
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(16, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(16, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.GlobalMaxPooling2D(),
        layers.Dense(1),
    ],
    name="discriminator",
)

latent_dim = 16
generator = keras.Sequential(
    [
        keras.Input(shape=(latent_dim,)),
        layers.Dense(7 * 7 * 16),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Reshape((7, 7, 16)),
        layers.Conv2DTranspose(16, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2DTranspose(16, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
    ],
    name="generator",
)


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.seed_generator = keras.random.SeedGenerator(1337)
        self.built = True

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real_images):
        if isinstance(real_images, tuple):
            real_images = real_images[0]
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        generated_images = self.generator(random_latent_vectors)
        combined_images = ops.concatenate([generated_images, real_images], axis=0)
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))], axis=0)

        def d_loss_fn():
            return self.loss_fn(labels, self.discriminator(combined_images))

        d_weights = self.discriminator.trainable_weights
        d_loss, grads = loss_and_gradients(d_loss_fn, d_weights)
        self.d_optimizer.apply(grads, d_weights)

        random_latent_vectors = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        misleading_labels = ops.zeros((batch_size, 1))

        def g_loss_fn():
            return self.loss_fn(misleading_labels, self.discriminator(self.generator(random_latent_vectors)))

        g_weights = self.generator.trainable_weights
        g_loss, grads = loss_and_gradients(g_loss_fn, g_weights)
        self.g_optimizer.apply(grads, g_weights)

        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


rng = np.random.default_rng(0)
all_digits = rng.random((64, 28, 28, 1)).astype("float32")

gan = GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)
gan.compile(
    d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
    g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
    loss_fn=keras.losses.BinaryCrossentropy(from_logits=True),
)
history = gan.fit(all_digits, batch_size=32, epochs=1, verbose=0)
# Adversarial losses need not fall: the check is that both are finite.
print(
    "KERAS_SCRIPT_RESULT",
    json.dumps(
        {
            "losses": [float(v) for v in history.history["d_loss"]],
            "g_losses": [float(v) for v in history.history["g_loss"]],
        }
    ),
)
