"""What each page shows and what to look for, and the paper's names, for a student.

Plain text (no Streamlit), so the glossary page and the tests read the same words.
"""

from __future__ import annotations

PAGE_INTROS = {
    "train": (
        "Pick a data set and a family of sparse Bayesian networks, set its prior, and train. Every weight gets "
        "a posterior; families with a spike-and-slab prior also learn how likely each weight is to be needed at "
        "all (its *inclusion probability*). Watch the loss fall and the density (the fraction of weights kept) "
        "settle, then look at the result on the other pages."
    ),
    "inclusion": (
        "Each weight has a number that says how much the network needs it (for LBBNN: its inclusion "
        "probability). The histograms show these numbers per layer; the red line is the threshold, and weights "
        "on the kept side of it form the pruned network. Expect the bulk near the prior's psi, not at 0: the "
        "data says little about most weights, so their inclusion probability stays close to what the prior "
        "believed (the green curve or line); the weights the network needs move up towards 1, and a pile near 0 "
        "appears only where the data argues against a weight."
    ),
    "pruning": (
        "Prune at a threshold and see what it costs. The curve shows test accuracy (or RMSE) against the "
        "fraction of weights kept; click a point on it to move the threshold there. The star marks a suggested "
        "threshold: the sparsest network whose accuracy is within the chosen loss of the best. Download the "
        "pruned network or the curve when you are done."
    ),
    "uncertainty": (
        "A Bayesian network says how sure it is. For regression the bands widen where there is no data; for "
        "classification the bars show each class's probability, averaged over R sampled networks (the ticks are "
        "the single draws). Inputs unlike the training data (out of distribution) should get a higher entropy: "
        "their curve lies to the right, and an AUROC near 1 means they are told apart."
    ),
    "compare": (
        "Put several runs of one data set side by side. The first chart asks which method keeps its accuracy "
        "when pruned hardest; the second whether it knows what it does not know (out-of-distribution inputs "
        "should get higher entropy); the table gives every prediction mode's score, as in the paper's tables. "
        "Each family keeps its colour on every chart."
    ),
    "playground": (
        "A small network trains here, on this server, and is drawn while it learns (the line below the controls "
        "says how many weights it has): the fit with its uncertainty, which connections it keeps, and the "
        "inclusion histogram. Change the prior, "
        "the noise or the data and it starts again: watch a smaller psi prune more, or more noise widen the "
        "bands."
    ),
    "glossary": "The names the papers (and this app's prediction modes) use, in one place.",
}

GLOSSARY = [
    (
        "LBBNN",
        "Latent binary Bayesian neural network: every weight w = gamma * beta has a switch gamma "
        "(0 or 1, kept with inclusion probability alpha) and a value beta with a Gaussian posterior.",
    ),
    (
        "inclusion probability (alpha)",
        "the posterior probability that a weight's switch is on; the statistic LBBNN prunes on.",
    ),
    (
        "prior inclusion probability (psi)",
        "what the prior believes alpha to be before seeing data; smaller psi pushes towards sparser networks.",
    ),
    ("spike-and-slab prior", "a weight is exactly 0 (the spike) or drawn from a wide distribution (the slab)."),
    ("density", "the fraction of weights kept (1 = the dense network)."),
    (
        "SIM-SIM (mode bma)",
        "simulate the structure and simulate the weights: average the predictions of R "
        "networks, each with switches and weights drawn from the posterior (Bayesian model "
        "averaging).",
    ),
    ("ALL-MEA (mode mean)", "all weights, mean values: one dense network with each weight at its posterior mean."),
    (
        "MED-SIM (mode mpm)",
        "median probability model, simulated weights: keep the weights with alpha > 0.5 "
        "(the family's default cut) and average R draws of their values.",
    ),
    (
        "MED-MEA (mode mpm-mean)",
        "median probability model, mean weights: one sparse network, the weights with "
        "alpha > 0.5 at their posterior means.",
    ),
    (
        "PRN (mode prune)",
        "prune at any threshold of the family's statistic (the slider), with sampled or mean "
        "weights: the mode the Pruning page tunes.",
    ),
    ("R", "the number of posterior draws averaged per prediction."),
    (
        "doubt@0.95",
        "accuracy on the test inputs whose averaged top probability exceeds 0.95, and how many "
        "they are: a network that knows when it is sure.",
    ),
    ("ECE", "expected calibration error: how far the stated confidence is from the accuracy it achieves."),
    ("NLL", "negative log-likelihood of the test labels: lower is better, punishes confident mistakes."),
    ("predictive entropy", "how spread the averaged class probabilities are: 0 = certain, log K = uniform."),
    (
        "AUROC (entropy)",
        "probability that an out-of-distribution input has a higher entropy than an in-domain "
        "one (0.5 = no separation, 1 = perfect).",
    ),
    ("OOD", "out of distribution: inputs unlike the training data (another image set, noise, rotated digits)."),
    (
        "signal-to-noise |mu|/sigma",
        "the statistic Gaussian BNNs prune on: a weight whose mean is small next to "
        "its uncertainty is not needed; the default cut is 0.83.",
    ),
    (
        "log alpha (sparse VD)",
        "sparse variational dropout's noise level per weight; weights with log alpha above 3 are pruned.",
    ),
    ("horseshoe", "a prior that shrinks whole units; a unit is pruned when its scale is almost surely tiny."),
    ("empirical Bayes", "fitting the prior's own parameters (here the Beta prior's a and b) to the data."),
    (
        "ELBO / KL weight",
        "training maximises the evidence lower bound; the KL weight tempers the prior's pull (1 = the ELBO itself).",
    ),
]
