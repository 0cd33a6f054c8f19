//! The KV pool's bookkeeping: the pool's slots are cut into blocks of `BLOCK_TOKENS`, and each
//! running sequence holds a table of the blocks its positions live in, so sequences of any
//! length share one cache and a finished one gives its blocks back at once. The tables are
//! host data; the backend sees the slot of each position (`Backend::paged_attention`).

use crate::engine::kv_budget::BLOCK_TOKENS;

/// The free blocks of a pool of `total` blocks.
#[derive(Debug)]
pub struct BlockPool {
    /// Free block ids, the next one handed out last (lowest ids first, so runs are repeatable).
    free: Vec<u32>,
    total: usize,
}

impl BlockPool {
    pub fn new(total: usize) -> BlockPool {
        BlockPool { free: (0..total as u32).rev().collect(), total }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }
}

/// The blocks needed for `tokens` positions.
pub fn blocks_for(tokens: usize) -> usize {
    tokens.div_ceil(BLOCK_TOKENS)
}

/// One sequence's blocks: position `p` lives in slot `blocks[p / BLOCK_TOKENS] * BLOCK_TOKENS
/// + p % BLOCK_TOKENS` of the pool.
#[derive(Debug, Default)]
pub struct BlockTable {
    blocks: Vec<u32>,
}

impl BlockTable {
    /// Grow to hold positions `0 .. tokens`. Takes nothing and returns false when the pool has
    /// too few free blocks.
    pub fn reserve(&mut self, pool: &mut BlockPool, tokens: usize) -> bool {
        let more = blocks_for(tokens).saturating_sub(self.blocks.len());
        if more > pool.free.len() {
            return false;
        }
        let at = pool.free.len() - more;
        self.blocks.extend(pool.free.drain(at..).rev());
        true
    }

    /// Give every block back to the pool.
    pub fn release(&mut self, pool: &mut BlockPool) {
        pool.free.extend(self.blocks.drain(..).rev());
    }

    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The tokens the table holds.
    pub fn capacity(&self) -> usize {
        self.blocks.len() * BLOCK_TOKENS
    }

    pub fn slot(&self, position: usize) -> usize {
        self.blocks[position / BLOCK_TOKENS] as usize * BLOCK_TOKENS + position % BLOCK_TOKENS
    }

    /// The slots of positions `0 .. len`, in position order.
    pub fn slots(&self, len: usize) -> Vec<usize> {
        (0..len).map(|p| self.slot(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_take_the_lowest_free_blocks_and_give_them_back() {
        let mut pool = BlockPool::new(6);
        let (mut a, mut b) = (BlockTable::default(), BlockTable::default());
        assert!(a.reserve(&mut pool, 20));
        assert!(b.reserve(&mut pool, 16));
        assert_eq!((a.blocks(), b.blocks(), pool.free_blocks()), (2, 1, 3));
        assert_eq!((a.slot(0), a.slot(15), a.slot(16), a.slot(19), b.slot(3)), (0, 15, 16, 19, 35));
        // Growing within the last block takes nothing; past it, the next free block.
        assert!(a.reserve(&mut pool, 32));
        assert!(a.reserve(&mut pool, 33));
        assert_eq!((a.blocks(), pool.free_blocks(), a.slot(32)), (3, 2, 48));
        // More than is free: nothing taken.
        assert!(!b.reserve(&mut pool, 16 * 4));
        assert_eq!((b.blocks(), pool.free_blocks()), (1, 2));
        a.release(&mut pool);
        assert_eq!((a.blocks(), pool.free_blocks()), (0, 5));
        // The freed blocks are handed out again, lowest first.
        let mut c = BlockTable::default();
        assert!(c.reserve(&mut pool, 17));
        assert_eq!(c.slots(17)[15..], [15, 16]);
        assert_eq!(c.capacity(), 32);
    }
}
