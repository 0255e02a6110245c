//! Parameters of content-defined chunking (FastCDC 2020 with normalized
//! chunking), validated up front: the `fastcdc` crate asserts on values out
//! of its range, and a bad configuration must be an error, not a panic.

use fastcdc::v2020;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkParams {
    min: u32,
    avg: u32,
    max: u32,
    level: u8,
}

impl ChunkParams {
    /// restic-like defaults (DESIGN.md): 512 KiB min, 1 MiB average, 8 MiB max,
    /// normalization level 1.
    pub const DEFAULT: ChunkParams = ChunkParams {
        min: 512 * 1024,
        avg: 1024 * 1024,
        max: 8 * 1024 * 1024,
        level: 1,
    };

    /// Sizes in bytes; `level` is FastCDC's normalization level 0..=3.
    pub fn new(min: u32, avg: u32, max: u32, level: u8) -> Result<Self, ChunkParamsError> {
        let check = |what, v: u32, lo: u32, hi: u32| {
            if (lo..=hi).contains(&v) {
                Ok(())
            } else {
                Err(ChunkParamsError::OutOfRange {
                    what,
                    value: v,
                    lo,
                    hi,
                })
            }
        };
        check("min", min, v2020::MINIMUM_MIN, v2020::MINIMUM_MAX)?;
        check("avg", avg, v2020::AVERAGE_MIN, v2020::AVERAGE_MAX)?;
        check("max", max, v2020::MAXIMUM_MIN, v2020::MAXIMUM_MAX)?;
        if !(min <= avg && avg <= max) {
            return Err(ChunkParamsError::Order { min, avg, max });
        }
        if level > 3 {
            return Err(ChunkParamsError::Level(level));
        }
        Ok(Self {
            min,
            avg,
            max,
            level,
        })
    }

    pub fn min(&self) -> u32 {
        self.min
    }
    pub fn avg(&self) -> u32 {
        self.avg
    }
    pub fn max(&self) -> u32 {
        self.max
    }
    pub fn level(&self) -> u8 {
        self.level
    }

    pub(crate) fn normalization(&self) -> v2020::Normalization {
        match self.level {
            0 => v2020::Normalization::Level0,
            1 => v2020::Normalization::Level1,
            2 => v2020::Normalization::Level2,
            _ => v2020::Normalization::Level3,
        }
    }
}

impl Default for ChunkParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ChunkParamsError {
    #[error("chunk {what} size {value} is outside {lo}..={hi}")]
    OutOfRange {
        what: &'static str,
        value: u32,
        lo: u32,
        hi: u32,
    },
    #[error("chunk sizes must satisfy min <= avg <= max (got {min}, {avg}, {max})")]
    Order { min: u32, avg: u32, max: u32 },
    #[error("normalization level must be 0..=3, got {0}")]
    Level(u8),
}
