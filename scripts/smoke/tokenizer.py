"""A small byte-level BPE tokenizer trained on a corpus, saved as a Hugging Face tokenizer (no hub)."""

from __future__ import annotations

from pathlib import Path


def bpe_tokenizer(folder: Path, corpus: list[str], special_tokens: list[str], chat_template: str):
    """`special_tokens[0]` pads; `<|im_end|>` ends a turn. Trained on `corpus` so its prompts take few tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=2048, special_tokens=special_tokens, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token=special_tokens[0],
                                     additional_special_tokens=special_tokens[1:], model_max_length=4096)
    hf_tok.chat_template = chat_template
    hf_tok.save_pretrained(folder)
    return hf_tok
