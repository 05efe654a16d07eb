"""A reinforcement-learning workload for hpctune: advantage actor-critic on CartPole-v1.

Gymnasium's CartPole-v1 (a pole on a cart; reward 1 per step upright; episodes end when it falls
or after 500 steps) in 8 environments at once (its vectorised implementation). The actor and the
critic are MLPs with one hidden tanh layer of ``hidden`` units; each update uses ``n_steps``
steps of the 8 environments (n-step returns with discount ``gamma``, an ``entropy`` bonus, the
critic's loss weighted 0.5), Adam with learning rate ``lr``, gradients clipped at norm 0.5. One
step of the study is 2,048 environment steps (256 of each environment); after it the greedy
policy plays 8 evaluation episodes (seeds fixed per step) and their mean return is reported:
between about 9 and exactly 500, the metric's upper bound. Deterministic for a given trial
seed on one machine, also across interruptions (the environments are reset from seeds derived
from (trial seed, step) at each step's start; the checkpoint holds the networks and the
optimizer; one thread per worker).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

ENVS = 8
STEPS_PER_ENV = 256
EVAL_EPISODES = 8


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs, one hidden tanh layer each."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.actor = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 2))
        self.critic = nn.Sequential(nn.Linear(4, hidden), nn.Tanh(), nn.Linear(hidden, 1))


def evaluate(model: ActorCritic, seed: int) -> float:
    """The mean return of the greedy policy over 8 episodes started from ``seed``."""
    env = gym.make_vec(
        "CartPole-v1", num_envs=EVAL_EPISODES, vectorization_mode="vector_entry_point"
    )
    obs, _ = env.reset(seed=seed)
    returns = np.zeros(EVAL_EPISODES)
    done = np.zeros(EVAL_EPISODES, dtype=bool)
    with torch.no_grad():
        while not done.all():
            logits = model.actor(torch.as_tensor(obs, dtype=torch.float32))
            obs, reward, terminated, truncated, _ = env.step(logits.argmax(1).numpy())
            returns += reward * ~done
            done |= terminated | truncated
    env.close()
    return float(returns.mean())


def train(ctx) -> None:
    """Train for ctx.max_steps steps, reporting the greedy policy's mean return after each."""
    torch.set_num_threads(1)
    p = ctx.params
    torch.manual_seed(ctx.seed)
    model = ActorCritic(p["hidden"])
    optimizer = torch.optim.Adam(model.parameters(), lr=p["lr"])
    state = ctx.load_checkpoint()
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    n_steps, gamma = p["n_steps"], p["gamma"]
    env = gym.make_vec("CartPole-v1", num_envs=ENVS, vectorization_mode="vector_entry_point")
    for step in range(ctx.start_step, ctx.max_steps):
        torch.manual_seed(ctx.seed * 1000 + step)  # the actions sampled in this step
        obs, _ = env.reset(seed=ctx.seed * 1000 + step)
        for _ in range(STEPS_PER_ENV // n_steps):
            observations, actions, rewards, dones = [], [], [], []
            for _ in range(n_steps):
                x = torch.as_tensor(obs, dtype=torch.float32)
                with torch.no_grad():
                    action = torch.distributions.Categorical(logits=model.actor(x)).sample()
                obs, reward, terminated, truncated, _ = env.step(action.numpy())
                observations.append(x)
                actions.append(action)
                rewards.append(torch.as_tensor(reward, dtype=torch.float32))
                dones.append(torch.as_tensor(terminated | truncated, dtype=torch.float32))
            with torch.no_grad():
                ret = model.critic(torch.as_tensor(obs, dtype=torch.float32)).squeeze(1)
            returns = []
            for reward, done in zip(reversed(rewards), reversed(dones), strict=True):
                ret = reward + gamma * ret * (1.0 - done)
                returns.append(ret)
            returns.reverse()
            x = torch.stack(observations).reshape(-1, 4)
            target = torch.stack(returns).reshape(-1)
            dist = torch.distributions.Categorical(logits=model.actor(x))
            value = model.critic(x).squeeze(1)
            advantage = (target - value).detach()
            loss = (
                -(dist.log_prob(torch.stack(actions).reshape(-1)) * advantage).mean()
                + 0.5 * (target - value).pow(2).mean()
                - p["entropy"] * dist.entropy().mean()
            )
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
        episode_return = evaluate(model, seed=10_000 + step)
        result = ctx.report(step=step + 1, episode_return=episode_return)
        if (step + 1) % 5 == 0 or step + 1 == ctx.max_steps or result.should_stop:
            ctx.save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
        if result.should_stop:  # the policy suspended or stopped the trial
            break
    env.close()
    print(f"trial {ctx.trial_id}: episode_return {episode_return:.1f} at step {ctx.step}")
