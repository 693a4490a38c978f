"""Tiny, locally built models and tokenizer for the tests: no network, no downloads, seconds on 2 cores.

Every architecture uses the same small WordPiece vocabulary; model configs are hidden 32, 2 layers.
"""

import string

import torch
from transformers import AutoConfig, BertTokenizer

WORDS = (
    "the a an and or but not no yes is are was were be been this that these those it its i you he she we they "
    "me my your his her our their what which who when where why how good bad great terrible movie film story "
    "actor plot love hate fun boring best worst very really too so of in on at to from with for by as about "
    "question answer context paris france capital city river long short news tweet party speech hello hi "
    "thanks bye weather today sun rain cat dog red blue green one two three four five"
).split()


def tiny_tokenizer() -> BertTokenizer:
    """An uncased WordPiece tokenizer over ~160 words plus single characters (so nothing maps to [UNK])."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    pieces = ["##" + c for c in string.ascii_lowercase + string.digits]
    tokens = specials + sorted(set(WORDS)) + chars + pieces
    vocab = {token: index for index, token in enumerate(dict.fromkeys(tokens))}
    return BertTokenizer(vocab=vocab, do_lower_case=True, model_max_length=128)


def tiny_config(model_type: str = "bert", tokenizer=None, **overrides):
    """A hidden-32, 2-layer config of `model_type` (bert, roberta, electra, deberta-v2, bart, t5)."""
    tokenizer = tokenizer or tiny_tokenizer()
    common = dict(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    if model_type == "t5":  # T5 starts decoding from the pad token
        kwargs = dict(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2,
                      relative_attention_num_buckets=8, eos_token_id=tokenizer.sep_token_id,
                      decoder_start_token_id=tokenizer.pad_token_id)
    elif model_type == "bart":
        kwargs = dict(
            d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
            bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
            decoder_start_token_id=tokenizer.sep_token_id, forced_eos_token_id=None,
        )
    else:
        kwargs = dict(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=128,
        )
        if model_type == "electra":
            kwargs["embedding_size"] = 32
        if model_type == "roberta":
            kwargs["max_position_embeddings"] = 130  # RoBERTa offsets positions by pad_token_id + 1
    kwargs.update(common)
    kwargs.update(overrides)
    return AutoConfig.for_model(model_type, **kwargs)


def seed_all(seed: int = 0) -> None:
    torch.manual_seed(seed)


def save_tiny_bert(folder) -> str:
    """A seeded tiny BertModel and its tokenizer saved in `folder` (a local checkpoint for the run scripts)."""
    from transformers import AutoModel

    tokenizer = tiny_tokenizer()
    torch.manual_seed(0)
    AutoModel.from_config(tiny_config("bert", tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)
